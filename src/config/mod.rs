//! Where things live and which profile each agent role uses.
//!
//! The config file is TOML under the XDG config dir. It holds provider profiles and the
//! role → profile map, never an API key: keys come from the environment at call time.

use crate::llm::{ProviderKind, ProviderProfile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod companion;
mod memory;
mod scene;
mod write;

pub use companion::{CompanionConfig, PacketBudgets};
pub use memory::{EmbeddingConfig, Fusion, GraphConfig, MemoryConfig, Pooling, RetrievalConfig};
pub use scene::SceneConfig;
pub use crate::paths::{Paths, assets_dir, lore_dir, models_dir, prompts_dir};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the config file {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
    /// Valid TOML with a setting of the wrong kind (a word where a number goes).
    #[error("the config file {path} has a setting Lorekeeper cannot take: {message}")]
    Setting { path: PathBuf, message: String },
    #[error("cannot write the config file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("no profile named {0:?}")]
    UnknownProfile(String),
    #[error("invalid profile: {0}")]
    Invalid(String),
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
}

/// Agent roles that can each be mapped to a profile.
pub const ROLES: &[&str] = &[
    "director",
    "character",
    "narrator",
    "world",
    "summariser",
    "companion",
    "identity.personality",
    "identity.backstory_motivation",
    "identity.voice_dialogue",
    "identity.physical_description",
    "identity.story_arc",
    "identity.relationships",
    "identity.final_consolidation",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// The profile used by any role not mapped in `roles`.
    pub default_profile: String,
    /// Role name → profile name.
    pub roles: BTreeMap<String, String>,
    #[serde(rename = "profile")]
    pub profiles: Vec<ProviderProfile>,
    pub memory: MemoryConfig,
    pub scene: SceneConfig,
    pub companion: CompanionConfig,
}

impl Default for Config {
    /// With the embedded model installed, a new user's agents run on it: real answers,
    /// offline, with no setup. Without it they fall back to the scripted demo.
    fn default() -> Self {
        let local_installed = crate::llm::local::default_model_path().is_file();
        Self {
            default_profile: if local_installed { "local" } else { "demo" }.into(),
            roles: BTreeMap::new(),
            profiles: vec![local_model_profile(), demo_profile(), local_server_profile()],
            memory: Default::default(),
            scene: Default::default(),
            companion: Default::default(),
        }
    }
}

/// The embedded model installed by the set-up script (Gemma 3 270M), run in-process.
/// The path is relative so a saved config keeps working when the checkout moves: the
/// local provider looks for it under the models folder.
pub fn local_model_profile() -> ProviderProfile {
    ProviderProfile {
        name: "local".into(),
        kind: ProviderKind::Local,
        model: "gemma-3-270m-q4_k_m".into(),
        path: Some(PathBuf::from(crate::llm::local::DEFAULT_MODEL_FILE)),
        max_context_tokens: 8192,
        ..Default::default()
    }
}

/// The offline demo profile: replies come from the script shipped in `assets/`, so
/// every flow can be walked through with no model and no network.
pub fn demo_profile() -> ProviderProfile {
    ProviderProfile {
        name: "demo".into(),
        kind: ProviderKind::Scripted,
        model: "lorekeeper-demo-script".into(),
        path: Some(assets_dir().join("demo-script.json")),
        max_context_tokens: 8192,
        ..Default::default()
    }
}

/// A ready-made profile for a llama.cpp / Ollama / LM Studio server on this machine.
pub fn local_server_profile() -> ProviderProfile {
    ProviderProfile {
        name: "local-server".into(),
        kind: ProviderKind::Openai,
        base_url: Some("http://127.0.0.1:8080/v1".into()),
        model: "local".into(),
        max_context_tokens: 8192,
        ..Default::default()
    }
}

impl Config {
    /// Load from `path`; a missing file gives the defaults (and is not created until
    /// the user saves something).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let (config, unknown) = Self::load_checked(path)?;
        for key in unknown {
            tracing::warn!(%key, path = %path.display(), "unknown config setting ignored");
        }
        Ok(config)
    }

    /// [`Self::load`], also naming the settings in the file that nothing reads (dotted
    /// paths such as `memory.graph.rebuild_after`). Why: a misspelt or retired key is
    /// otherwise ignored without a word, and the user wonders why a change did nothing.
    /// An error would be harsher than the mistake: the rest of the file still applies.
    pub fn load_checked(path: &Path) -> Result<(Self, Vec<String>), ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Self::default(), Vec::new())),
            Err(source) => return Err(ConfigError::Read { path: path.to_path_buf(), source }),
        };
        let parse_err = |e: toml::de::Error| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() };
        let mut unknown = Vec::new();
        let deserializer = toml::Deserializer::parse(&text).map_err(parse_err)?;
        let mut config: Config = serde_ignored::deserialize(deserializer, |key| unknown.push(key.to_string()))
            .map_err(|e: toml::de::Error| ConfigError::Setting { path: path.to_path_buf(), message: e.to_string() })?;
        // A file that lists profiles of its own still has the built-in ones (the embedded
        // model, the demo script, a local server) unless it names one the same: a role
        // mapped to `local` must not break because another profile was added by hand.
        // They come first, in the defaults' order (the file's own version of one, if it
        // has one), then the file's others in its order: a saved config, which leaves the
        // unchanged built-ins out, reads back in the same order.
        if !config.profiles.is_empty() {
            let mut ordered: Vec<ProviderProfile> = [local_model_profile(), demo_profile(), local_server_profile()]
                .into_iter()
                .map(|builtin| config.profile(&builtin.name).cloned().unwrap_or(builtin))
                .collect();
            let builtin = |name: &str| ordered.iter().any(|o| o.name == name);
            let others: Vec<ProviderProfile> = config.profiles.iter().filter(|p| !builtin(&p.name)).cloned().collect();
            ordered.extend(others);
            config.profiles = ordered;
        }
        // A role nothing asks for (`directr`) is a setting nothing reads.
        unknown.extend(config.roles.keys().filter(|role| !ROLES.contains(&role.as_str())).map(|role| format!("roles.{role}")));
        config.validate()?;
        Ok((config, unknown))
    }

    /// One line per unknown setting of [`Self::load_checked`], for a person to read.
    /// A key written into the file itself gets its own advice: it is never read from
    /// there, and its value is never repeated.
    pub fn unknown_key_warnings(path: &Path, unknown: &[String]) -> Vec<String> {
        const SECRETS: &[&str] =
            &["key", "api_key", "apikey", "api-key", "secret", "api_secret", "token", "api_token", "access_token", "auth_token", "bearer", "password"];
        let known = known_keys();
        unknown
            .iter()
            .map(|key| {
                let last = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
                // The setting meant: a known name at the same place a typo or two away.
                let place = key.rsplit_once('.').map(|(p, _)| generic_path(p)).unwrap_or_default();
                let close = |typed: &str, name: &str| {
                    let d = strsim::damerau_levenshtein(typed, name);
                    (d > 0 && d <= 2.max(name.len() / 5)).then_some(d)
                };
                let meant = match key.strip_prefix("roles.") {
                    // A role's name may hold dots (`identity.personality`).
                    Some(role) => ROLES.iter().filter_map(|r| close(&role.to_ascii_lowercase(), r).map(|d| (d, r.to_string()))).min(),
                    None => known.iter().filter(|(p, _)| *p == place).filter_map(|(_, name)| close(&last, name).map(|d| (d, name.clone()))).min(),
                }
                .map(|(_, name)| name);
                let why = if let Some(name) = meant {
                    format!("did you mean `{name}`?")
                } else if SECRETS.contains(&last.as_str()) {
                    "a key is never read from the config file: name its environment variable in `api_key_env`, or keep it in the OS keyring with `providers key set` or the Providers panel".into()
                } else {
                    "misspelt, or no longer used".into()
                };
                format!("{}: unknown setting `{key}` ignored ({why})", path.display())
            })
            .collect()
    }

    /// Write atomically (temp file, then rename) so a crash never leaves half a config.
    /// The file's own text is kept where nothing changed: its comments, its order and any
    /// setting we do not read (`write`).
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        self.validate()?;
        let current = match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ConfigError::Read { path: path.to_path_buf(), source }),
        };
        let text = write::merged(self, current.as_deref()).map_err(ConfigError::Invalid)?;
        let write_err = |source| ConfigError::Write { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(write_err)?;
        std::fs::rename(&tmp, path).map_err(write_err)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.profiles {
            if p.name.trim().is_empty() {
                return Err(ConfigError::Invalid("a profile has an empty name".into()));
            }
            if !seen.insert(p.name.as_str()) {
                return Err(ConfigError::Invalid(format!("two profiles are named {:?}", p.name)));
            }
            if p.max_context_tokens < 256 {
                return Err(ConfigError::Invalid(format!("profile {:?}: max_context_tokens must be at least 256", p.name)));
            }
        }
        if !self.profiles.is_empty() && self.profile(&self.default_profile).is_none() {
            return Err(ConfigError::UnknownProfile(self.default_profile.clone()));
        }
        for (role, profile) in &self.roles {
            if self.profile(profile).is_none() {
                return Err(ConfigError::Invalid(format!("role {role:?} maps to unknown profile {profile:?}")));
            }
        }
        Ok(())
    }

    pub fn profile(&self, name: &str) -> Option<&ProviderProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The profile an agent role uses: its mapping, else the default.
    pub fn profile_for_role(&self, role: &str) -> Result<&ProviderProfile, ConfigError> {
        let name = self.roles.get(role).unwrap_or(&self.default_profile);
        self.profile(name).ok_or_else(|| ConfigError::UnknownProfile(name.clone()))
    }

    /// Insert or replace a profile by name.
    pub fn upsert_profile(&mut self, profile: ProviderProfile) {
        match self.profiles.iter_mut().find(|p| p.name == profile.name) {
            Some(slot) => *slot = profile,
            None => self.profiles.push(profile),
        }
    }
}

/// `profile.3.sampler` → `profile.sampler`: where a setting sits, whichever profile.
fn generic_path(path: &str) -> String {
    path.split('.').filter(|part| part.parse::<usize>().is_err()).collect::<Vec<_>>().join(".")
}

/// Every setting's (place, name) the config file can hold, from the defaults written out.
fn known_keys() -> Vec<(String, String)> {
    fn walk(value: &toml::Value, place: &str, out: &mut Vec<(String, String)>) {
        match value {
            toml::Value::Table(table) => {
                for (name, inner) in table {
                    out.push((place.to_string(), name.clone()));
                    walk(inner, &if place.is_empty() { name.clone() } else { format!("{place}.{name}") }, out);
                }
            }
            toml::Value::Array(items) => items.iter().for_each(|item| walk(item, place, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut defaults = toml::Value::try_from(Config::default()).unwrap_or(toml::Value::Table(Default::default()));
    // Settings that are unset by default are settings all the same.
    if let Some(profile) = defaults.get_mut("profile").and_then(|p| p.as_array_mut()).and_then(|a| a.first_mut()) {
        let sampler = crate::llm::SamplerSettings {
            temperature: Some(0.0),
            top_p: Some(0.0),
            top_k: Some(0),
            max_tokens: Some(0),
            seed: Some(0),
            presence_penalty: Some(0.0),
            frequency_penalty: Some(0.0),
            ..Default::default()
        };
        let full = ProviderProfile { base_url: Some(String::new()), api_key_env: Some(String::new()), sampler, ..ProviderProfile::default() };
        if let Ok(full) = toml::Value::try_from(full) {
            *profile = full;
        }
    }
    walk(&defaults, "", &mut out);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_gives_defaults_and_save_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/config.toml");
        let mut config = Config::load(&path).unwrap();
        assert_eq!(config, Config::default());
        config.upsert_profile(ProviderProfile { name: "big".into(), model: "m".into(), ..Default::default() });
        config.roles.insert("director".into(), "big".into());
        config.save(&path).unwrap();
        let back = Config::load(&path).unwrap();
        assert_eq!(back, config);
        assert_eq!(back.profile_for_role("director").unwrap().name, "big");
        assert_eq!(back.profile_for_role("narrator").unwrap().name, back.default_profile);
        assert_eq!(back.profile("local").map(|p| p.kind), Some(ProviderKind::Local));
    }

    #[test]
    fn unknown_settings_are_named_and_the_rest_still_applies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[memory.graph]\nrebuild_after = 10\nmin_vectors = 5\n[memory.retreival]\nkeyword_weight = 0.9\n").unwrap();
        let (config, unknown) = Config::load_checked(&path).unwrap();
        assert_eq!(config.memory.graph.min_vectors, 5);
        assert_eq!(unknown, ["memory.graph.rebuild_after", "memory.retreival"]);
        let lines = Config::unknown_key_warnings(&path, &unknown);
        assert!(lines[0].ends_with("unknown setting `memory.graph.rebuild_after` ignored (misspelt, or no longer used)"), "{lines:?}");
        // A key pasted into the file is pointed to where keys live; its value is never repeated.
        std::fs::write(&path, "default_profile = \"demo\"\n[[profile]]\nname = \"demo\"\nmodel = \"m\"\napi_key = \"sk-secret-123\"\n").unwrap();
        let (_, unknown) = Config::load_checked(&path).unwrap();
        let lines = Config::unknown_key_warnings(&path, &unknown);
        assert_eq!(unknown, ["profile.0.api_key"]);
        assert!(lines[0].contains("never read from the config file") && !lines[0].contains("sk-secret"), "{lines:?}");
        // A typo of a setting is pointed to the setting, not to where keys live.
        std::fs::write(&path, "[[profile]]\nname = \"demo\"\nmodel = \"m\"\nmax_context_token = 4096\n[profile.sampler]\nmax_token = 300\n[scene]\nbogus_key = 1\n[scene.budgets.percent]\nhistroy = 40\nlore = 20\n").unwrap();
        let (_, unknown) = Config::load_checked(&path).unwrap();
        let lines = Config::unknown_key_warnings(&path, &unknown);
        assert!(lines.iter().any(|l| l.contains("`profile.0.max_context_token` ignored (did you mean `max_context_tokens`?)")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("`profile.0.sampler.max_token` ignored (did you mean `max_tokens`?)")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("`scene.bogus_key` ignored (misspelt, or no longer used)")), "{lines:?}");
        // A misspelt budget section is one more such setting: the file still loads.
        assert!(lines.iter().any(|l| l.contains("`scene.budgets.percent.histroy` ignored (did you mean `history`?)")), "{lines:?}");
        assert_eq!(Config::load(&path).unwrap().scene.budgets.percent(crate::prompting::Section::Lore), 20.0);
        // Everything a saved config writes is read back: no false alarms.
        std::fs::remove_file(&path).unwrap();
        let mut full = Config::default();
        full.roles.insert("director".into(), "demo".into());
        full.save(&path).unwrap();
        assert_eq!(Config::load_checked(&path).unwrap(), (full, Vec::new()));
    }

    /// A hand-written file with a profile of its own keeps the built-in ones a role may
    /// name, and a misspelt role is named like any setting nothing reads.
    #[test]
    fn a_profile_of_ones_own_keeps_the_built_in_ones_and_a_misspelt_role_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = "default_profile = \"mock\"\n[roles]\nnarrator = \"local\"\ndirectr = \"mock\"\n\
                    [[profile]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
        std::fs::write(&path, text).unwrap();
        let (config, unknown) = Config::load_checked(&path).unwrap();
        assert_eq!(config.profile_for_role("narrator").unwrap().name, "local");
        assert!(config.profile("demo").is_some() && config.profile("mock").is_some());
        assert_eq!(unknown, ["roles.directr"]);
        assert!(Config::unknown_key_warnings(&path, &unknown)[0].ends_with("(did you mean `director`?)"));
    }

    #[test]
    fn bad_toml_and_bad_references_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "default_profile = [").unwrap();
        assert!(matches!(Config::load(&path), Err(ConfigError::Parse { .. })));
        std::fs::write(&path, "default_profile = \"nope\"\n[[profile]]\nname = \"a\"\nmodel = \"m\"\n").unwrap();
        assert!(matches!(Config::load(&path), Err(ConfigError::UnknownProfile(_))));
    }
}
