//! Writing a changed config back into the user's own file: what changed is changed in
//! place, and the rest of the text stays as the user wrote it (comments, order, layout,
//! and settings we do not know, which are warned about at load rather than deleted).
//! A setting the file never had is written only when it differs from the default, so a
//! file stays as short as its author made it.

use super::{Config, ProviderProfile};
use std::collections::HashSet;
use toml_edit::{DocumentMut, Item, Table};

/// The text to write for `config`, given the file's current text (`None`: no file yet).
/// A current text that no longer parses is replaced whole.
pub(super) fn merged(config: &Config, current: Option<&str>) -> Result<String, String> {
    let fresh = toml::to_string_pretty(config).map_err(|e| e.to_string())?;
    let defaults = toml::to_string_pretty(&Config::default()).map_err(|e| e.to_string())?;
    let parse = |text: &str| text.parse::<DocumentMut>().map_err(|e| e.to_string());
    let (new, defaults) = (parse(&fresh)?, parse(&defaults)?);
    let Some(current) = current else {
        let mut doc = DocumentMut::new();
        merge_table(doc.as_table_mut(), new.as_table(), Some(defaults.as_table()), &HashSet::new(), "");
        profiles(&mut doc, config, None);
        return Ok(doc.to_string());
    };
    let Ok(mut doc) = parse(current) else { return Ok(fresh) };
    // The settings the file has that nothing reads: kept as written.
    let mut unknown = HashSet::new();
    if let Ok(deserializer) = toml::Deserializer::parse(current) {
        let _: Result<Config, _> = serde_ignored::deserialize(deserializer, |key| {
            unknown.insert(key.to_string());
        });
    }
    let before: Option<Config> = toml::from_str(current).ok();
    merge_table(doc.as_table_mut(), new.as_table(), Some(defaults.as_table()), &unknown, "");
    profiles(&mut doc, config, before.as_ref().filter(|_| current_has_profiles(current)));
    Ok(doc.to_string())
}

fn current_has_profiles(text: &str) -> bool {
    text.parse::<DocumentMut>().is_ok_and(|d| d.contains_key("profile"))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

/// Two items the same setting: compared as values, whatever their layout or comments
/// (a whole number the user wrote as `40` is the same share as `40.0`).
fn same(a: &Item, b: &Item) -> bool {
    fn eq(a: &toml::Value, b: &toml::Value) -> bool {
        use toml::Value::{Array, Float, Integer, Table};
        match (a, b) {
            (Integer(x), Float(y)) | (Float(y), Integer(x)) => (*x as f64) == *y,
            (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| eq(a, b)),
            (Table(x), Table(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w))),
            _ => a == b,
        }
    }
    match (a.as_value(), b.as_value()) {
        (Some(a), Some(b)) => {
            let read = |v: &toml_edit::Value| format!("v = {}", v.to_string().trim()).parse::<toml::Table>().ok().and_then(|mut t| t.remove("v"));
            matches!((read(a), read(b)), (Some(a), Some(b)) if eq(&a, &b))
        }
        _ => false,
    }
}

/// Bring `old` to the values of `new`, leaving equal settings (and their text) alone.
/// Profiles (`[[profile]]`) are done by [`profiles`].
fn merge_table(old: &mut Table, new: &Table, defaults: Option<&Table>, unknown: &HashSet<String>, prefix: &str) {
    for (key, item) in new.iter() {
        if prefix.is_empty() && key == "profile" {
            continue;
        }
        let default = defaults.and_then(|d| d.get(key));
        match item {
            Item::Table(table) => {
                let path = join(prefix, key);
                match old.get_mut(key) {
                    Some(Item::Table(mine)) => merge_table(mine, table, default.and_then(Item::as_table), unknown, &path),
                    Some(other) => {
                        // A table the user wrote inline: rewritten only when it differs.
                        let mut fresh = Table::new();
                        merge_table(&mut fresh, table, None, unknown, &path);
                        if other.as_inline_table().map(|t| t.to_string()) != Some(fresh.clone().into_inline_table().to_string()) {
                            *other = Item::Table(fresh);
                        }
                    }
                    None => {
                        let mut fresh = Table::new();
                        // No `[memory]` header over a lone `[memory.embedding]`.
                        fresh.set_implicit(true);
                        merge_table(&mut fresh, table, default.and_then(Item::as_table), unknown, &path);
                        if !fresh.is_empty() {
                            old.insert(key, Item::Table(fresh));
                        }
                    }
                }
            }
            _ => match old.get_mut(key) {
                Some(mine) if same(mine, item) => {}
                Some(mine) => {
                    // The new value with the old one's surrounding spaces and comment.
                    let decor = mine.as_value().map(|v| v.decor().clone());
                    *mine = item.clone();
                    if let (Some(decor), Some(value)) = (decor, mine.as_value_mut()) {
                        *value.decor_mut() = decor;
                    }
                }
                // The default profile is always written: its default depends on whether the
                // embedded model is installed, and a file must mean the same everywhere.
                None if default.is_some_and(|d| same(d, item)) && !(prefix.is_empty() && key == "default_profile") => {}
                None => {
                    old.insert(key, item.clone());
                }
            },
        }
    }
    // What the config no longer has goes, unless it is a setting nothing reads (the user's
    // own text, warned about at load).
    let gone: Vec<String> = old
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| !(prefix.is_empty() && k == "profile"))
        .filter(|k| new.get(k).is_none() && !unknown.iter().any(|u| *u == join(prefix, k) || u.starts_with(&format!("{}.", join(prefix, k)))))
        .collect();
    for key in gone {
        old.remove(&key);
    }
}

/// The `[[profile]]` tables: a profile that did not change keeps its table as written;
/// a built-in profile the file never listed is not written (it is there at load anyway).
fn profiles(doc: &mut DocumentMut, config: &Config, before: Option<&Config>) {
    let builtins = [super::local_model_profile(), super::demo_profile(), super::local_server_profile()];
    let listed = |p: &ProviderProfile| before.is_some_and(|b| b.profiles.iter().any(|o| o.name == p.name));
    let wanted: Vec<&ProviderProfile> =
        config.profiles.iter().filter(|p| listed(p) || !builtins.iter().any(|b| b == *p)).collect();
    let old_tables: Vec<Table> =
        doc.get("profile").and_then(Item::as_array_of_tables).map(|a| a.iter().cloned().collect()).unwrap_or_default();
    if wanted.is_empty() {
        doc.remove("profile");
        return;
    }
    let name_of = |t: &Table| t.get("name").and_then(Item::as_str).map(str::to_string);
    // Nothing changed in them: the file's tables stay exactly as they are.
    let unchanged = |p: &ProviderProfile| before.is_some_and(|b| b.profiles.iter().any(|o| o == p));
    if wanted.len() == old_tables.len()
        && wanted.iter().zip(&old_tables).all(|(p, t)| unchanged(p) && name_of(t).as_deref() == Some(p.name.as_str()))
    {
        return;
    }
    let mut array = toml_edit::ArrayOfTables::new();
    for profile in wanted {
        let kept = old_tables.iter().find(|t| name_of(t).as_deref() == Some(profile.name.as_str())).filter(|_| unchanged(profile));
        match kept {
            Some(table) => array.push(table.clone()),
            None => {
                let Ok(text) = toml::to_string_pretty(profile) else { continue };
                let Ok(table) = text.parse::<DocumentMut>() else { continue };
                array.push(table.as_table().clone());
            }
        }
    }
    // Tables render in the order of their positions, and tables taken from other
    // documents carry those documents' positions: the whole file is numbered afresh, the
    // profiles where the file had its first one (at the end when it had none), each
    // element's own tables right after it.
    let anchor = old_tables.iter().filter_map(Table::position).min();
    doc.insert("profile", Item::ArrayOfTables(array));
    renumber_document(doc, anchor);
}

/// Number every table of `doc` in the order it reads now, with the `[[profile]]` tables
/// at `anchor` (the position the file's first profile had) or last.
fn renumber_document(doc: &mut DocumentMut, anchor: Option<isize>) {
    let first = |item: &Item| match item {
        Item::Table(t) => Some(first_position(t)),
        Item::ArrayOfTables(a) => a.iter().map(first_position).min(),
        _ => None,
    };
    let mut units: Vec<(isize, String)> = doc
        .as_table()
        .iter()
        .filter(|(_, item)| matches!(item, Item::Table(_) | Item::ArrayOfTables(_)))
        .map(|(key, item)| {
            let at = if key == "profile" { anchor.unwrap_or(isize::MAX) } else { first(item).unwrap_or(isize::MAX) };
            (at, key.to_string())
        })
        .collect();
    units.sort_by_key(|(at, _)| *at);
    let mut next = 1;
    for (_, key) in units {
        match doc.get_mut(&key) {
            Some(Item::Table(t)) => renumber(t, &mut next),
            Some(Item::ArrayOfTables(a)) => a.iter_mut().for_each(|t| renumber(t, &mut next)),
            _ => {}
        }
    }
}

/// The smallest position among `table` and the tables under it.
fn first_position(table: &Table) -> isize {
    let own = table.position().unwrap_or(isize::MAX);
    table
        .iter()
        .filter_map(|(_, item)| match item {
            Item::Table(t) => Some(first_position(t)),
            Item::ArrayOfTables(a) => a.iter().map(first_position).min(),
            _ => None,
        })
        .fold(own, isize::min)
}

fn renumber(table: &mut Table, next: &mut isize) {
    table.set_position(Some(*next));
    *next += 1;
    for (_, item) in table.iter_mut() {
        if let Item::Table(t) = item {
            renumber(t, next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_keeps_the_users_comments_order_and_unknown_settings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = "# my setup\ndefault_profile = \"mock\" # the fake server\n\n[scene]\nnarator = false # misspelt on purpose\n\n\
                    [[profile]]\n# my server\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
        std::fs::write(&path, text).unwrap();
        let mut config = Config::load(&path).unwrap();
        config.memory.embedding.model_dir = Some("all-mpnet-base-v2".into());
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(saved.starts_with("# my setup\ndefault_profile = \"mock\" # the fake server\n"), "{saved}");
        assert!(saved.contains("narator = false # misspelt on purpose"), "{saved}");
        assert!(saved.contains("# my server\nname = \"mock\""), "{saved}");
        assert!(saved.contains("model_dir = \"all-mpnet-base-v2\""), "{saved}");
        assert!(!saved.contains("name = \"demo\"") && !saved.contains("[companion"), "defaults are not written out: {saved}");
        assert!(saved.lines().count() < 20, "{saved}");
        assert_eq!(Config::load(&path).unwrap(), config, "it reads back as the config saved");
        // A changed value keeps its comment; a profile changed is written anew, the rest kept.
        let mut again = config.clone();
        again.default_profile = "demo".into();
        again.profiles.iter_mut().find(|p| p.name == "mock").unwrap().model = "m2".into();
        again.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(saved.contains("default_profile = \"demo\" # the fake server"), "{saved}");
        assert!(saved.contains("model = \"m2\"") && saved.contains("narator = false"), "{saved}");
        assert_eq!(Config::load(&path).unwrap(), again);
        // A setting the program clears goes from the file.
        let mut cleared = again.clone();
        cleared.memory.embedding.model_dir = None;
        cleared.save(&path).unwrap();
        assert!(!std::fs::read_to_string(&path).unwrap().contains("model_dir"));
        assert_eq!(Config::load(&path).unwrap(), cleared);
    }

    #[test]
    fn several_profiles_of_ones_own_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut config = Config::default();
        for name in ["alpha", "beta", "gamma"] {
            let mut p = ProviderProfile { name: name.into(), model: format!("{name}-m"), ..Default::default() };
            p.sampler.max_tokens = Some(300);
            config.upsert_profile(p);
        }
        config.default_profile = "beta".into();
        config.save(&path).unwrap();
        assert_eq!(Config::load(&path).unwrap(), config, "{}", std::fs::read_to_string(&path).unwrap());
        // One changed in the middle: still in order, the others kept as written.
        std::fs::write(&path, format!("# mine\n{}", std::fs::read_to_string(&path).unwrap())).unwrap();
        config.profiles.iter_mut().find(|p| p.name == "beta").unwrap().model = "beta-2".into();
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(saved.starts_with("# mine\n"), "{saved}");
        assert_eq!(Config::load(&path).unwrap(), config, "{saved}");
    }

    /// What a user laid out stays laid out: profiles first, whole-number shares as
    /// written, and no bare `[memory]` header over the one setting that changed.
    #[test]
    fn a_change_elsewhere_moves_nothing_and_rewrites_no_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = "default_profile = \"mock\"\n\n[[profile]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n\
                    [scene.budgets.percent]\nhistory = 30\nlore = 15\n";
        std::fs::write(&path, text).unwrap();
        let mut config = Config::load(&path).unwrap();
        config.memory.embedding.model_dir = Some("all-mpnet-base-v2".into());
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(saved.starts_with(text), "{saved}");
        assert!(saved.contains("[memory.embedding]\nmodel_dir = \"all-mpnet-base-v2\"") && !saved.contains("[memory]\n"), "{saved}");
        assert_eq!(Config::load(&path).unwrap(), config);
        // A profile added goes with the file's own, not after everything else.
        config.upsert_profile(ProviderProfile { name: "second".into(), model: "m2".into(), ..Default::default() });
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        let (second, scene) = (saved.find("name = \"second\"").unwrap(), saved.find("[scene.budgets.percent]").unwrap());
        assert!(second < scene, "{saved}");
        assert_eq!(Config::load(&path).unwrap(), config, "{saved}");
    }

    #[test]
    fn a_new_file_holds_only_what_differs_from_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut config = Config::default();
        config.roles.insert("director".into(), "demo".into());
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert_eq!(saved.trim(), format!("default_profile = \"{}\"\n\n[roles]\ndirector = \"demo\"", config.default_profile), "{saved}");
        assert_eq!(Config::load(&path).unwrap(), config);
    }
}
