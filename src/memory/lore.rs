//! Markdown lore files (`lore/`, per world and per character) cut into chunks, embedded
//! and indexed as `lore` memories; a file is re-indexed only when its content changes
//! (its sha-256 is kept with every chunk).
//!
//! Layout: `lore/characters/ID/*.md` → scope `character:ID`, `lore/campaigns/ID/*.md` →
//! `campaign:ID`, `lore/worlds/ID/*.md` → `world:ID`, anything else → `world`.

use super::bank::{MemoryBank, MemoryError};
use super::records::{MemoryKind, NewMemory, Scope, ScopeKind};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Chunks aim at this many characters: a few paragraphs, well under the model's
/// 256-token window.
pub const CHUNK_CHARS: usize = 700;

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct LoreReport {
    pub files: usize,
    /// Files whose chunks were (re)written.
    pub indexed: usize,
    pub unchanged: usize,
    pub chunks: usize,
    /// Files that disappeared, whose chunks were removed.
    pub removed: usize,
}

/// Split markdown at headings and blank lines into chunks of about [`CHUNK_CHARS`],
/// each prefixed with its nearest heading so it stands on its own.
pub fn chunk_markdown(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut heading = String::new();
    let mut current = String::new();
    let flush = |current: &mut String, heading: &str, chunks: &mut Vec<String>| {
        let body = current.trim();
        if !body.is_empty() {
            chunks.push(if heading.is_empty() || body.starts_with('#') { body.to_string() } else { format!("{heading}\n{body}") });
        }
        current.clear();
    };
    for block in text.split("\n\n") {
        let block = block.trim();
        if block.is_empty() {
            continue;
        }
        if block.starts_with('#') {
            flush(&mut current, &heading, &mut chunks);
            heading = block.lines().next().unwrap_or_default().to_string();
            let rest = block.lines().skip(1).collect::<Vec<_>>().join("\n");
            current.push_str(rest.trim());
            continue;
        }
        if !current.is_empty() && current.chars().count() + block.chars().count() > CHUNK_CHARS {
            flush(&mut current, &heading, &mut chunks);
        }
        // A single paragraph longer than a chunk is cut at sentence ends.
        if block.chars().count() > CHUNK_CHARS {
            for sentence in block.split_inclusive(['.', '!', '?']) {
                if current.chars().count() + sentence.chars().count() > CHUNK_CHARS {
                    flush(&mut current, &heading, &mut chunks);
                }
                current.push_str(sentence);
            }
            continue;
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(block);
    }
    flush(&mut current, &heading, &mut chunks);
    chunks
}

/// The scope a lore file belongs to, from where it sits under the lore folder.
pub fn scope_for(root: &Path, file: &Path) -> Scope {
    let parts: Vec<String> = file
        .strip_prefix(root)
        .unwrap_or(file)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let kind = match parts.first().map(String::as_str) {
        Some("characters") => Some(ScopeKind::Character),
        Some("campaigns") => Some(ScopeKind::Campaign),
        Some("worlds") => Some(ScopeKind::World),
        _ => None,
    };
    match (kind, parts.len()) {
        (Some(kind), n) if n >= 3 => Scope { kind, id: Some(parts[1].clone()) },
        _ => Scope::world(),
    }
}

/// Folders deeper than this under the lore root are not read.
const MAX_DEPTH: usize = 32;

/// A folder's README says what the folder is for; it is not lore.
fn is_readme(path: &Path) -> bool {
    path.file_stem().is_some_and(|s| s.eq_ignore_ascii_case("readme"))
}

/// The markdown files under `dir` (not READMEs). A folder reached twice (a symlink loop, or two links
/// to one folder) is read once, and the walk stops at [`MAX_DEPTH`].
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>, seen: &mut std::collections::HashSet<PathBuf>, depth: usize) -> std::io::Result<()> {
    if depth > MAX_DEPTH || !seen.insert(std::fs::canonicalize(dir)?) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            markdown_files(&path, out, seen, depth + 1)?;
        } else if path.extension().is_some_and(|e| e == "md") && !is_readme(&path) {
            out.push(path);
        }
    }
    Ok(())
}

/// Index every markdown file under `root`, skipping files whose content is unchanged.
pub fn index_lore(bank: &MemoryBank, root: &Path) -> Result<LoreReport, MemoryError> {
    index_lore_where(bank, root, |_| true)
}

/// Index the markdown files under `root` whose scope `keep` accepts; chunks of a file it
/// refuses (or that is gone) are removed. A chat keeps only the folders of characters the
/// library holds, so the demo companion's lore stays out of a library without her.
pub fn index_lore_where(bank: &MemoryBank, root: &Path, keep: impl Fn(&Scope) -> bool) -> Result<LoreReport, MemoryError> {
    let mut files = Vec::new();
    if root.is_dir() {
        markdown_files(root, &mut files, &mut std::collections::HashSet::new(), 0)
            .map_err(|e| MemoryError::Read { path: root.display().to_string(), message: e.to_string() })?;
    }
    files.retain(|f| keep(&scope_for(root, f)));
    files.sort();
    let mut report = LoreReport { files: files.len(), ..Default::default() };
    let mut seen = Vec::new();
    for file in &files {
        let source = format!("lore:{}", file.strip_prefix(root).unwrap_or(file).display());
        seen.push(source.clone());
        let text = crate::paths::read_text_bounded(file, 16 << 20)
            .map_err(|e| MemoryError::Read { path: file.display().to_string(), message: e.to_string() })?;
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        if bank.source_hash(&source)?.as_deref() == Some(hash.as_str()) {
            report.unchanged += 1;
            continue;
        }
        let scope = scope_for(root, file);
        let chunks: Vec<NewMemory> = chunk_markdown(&text)
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| NewMemory {
                id: Some(format!("{source}#{i}")),
                kind: MemoryKind::Lore,
                scope: scope.clone(),
                text: chunk,
                source: Some(source.clone()),
                content_hash: Some(hash.clone()),
                ..Default::default()
            })
            .collect();
        report.chunks += chunks.len();
        // Embedded before anything is removed, then the old chunks out and the new in, in
        // one transaction: an embedder failure leaves the file's old chunks searchable.
        let prepared = bank.prepare(chunks)?;
        let write = bank.store().transaction(|tx| {
            let gone = super::remove_source(tx, &source)?;
            Ok(gone.and(prepared.write(tx)?))
        })?;
        bank.publish(write);
        report.indexed += 1;
    }
    for gone in bank.lore_sources()?.into_iter().filter(|s| !seen.contains(s)) {
        bank.remove_source(&gone)?;
        report.removed += 1;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink back up the tree is a loop the walk does not follow twice.
    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_walked_once() {
        let dir = tempfile::tempdir().unwrap();
        let lore = dir.path().join("lore/characters/ilse");
        std::fs::create_dir_all(&lore).unwrap();
        std::fs::write(lore.join("self.md"), "# Ilse\nShe binds books.").unwrap();
        std::os::unix::fs::symlink(dir.path().join("lore"), lore.join("again")).unwrap();
        let mut files = Vec::new();
        markdown_files(&dir.path().join("lore"), &mut files, &mut std::collections::HashSet::new(), 0).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
    }

    #[test]
    fn chunks_keep_their_heading_and_respect_the_size() {
        let long: String = "The tide turns twice a day. ".repeat(60);
        let text = format!("# Mira\n\nA cartographer.\n\n## Fears\n\nDeep water.\n\n{long}");
        let chunks = chunk_markdown(&text);
        assert!(chunks[0].starts_with("# Mira"));
        assert!(chunks.iter().skip(1).all(|c| c.starts_with("## Fears")), "{chunks:?}");
        assert!(chunks.iter().all(|c| c.chars().count() <= CHUNK_CHARS + 40));
        assert!(chunks.len() >= 3);
    }

    #[test]
    fn scope_follows_the_folder() {
        let root = Path::new("/lore");
        assert_eq!(scope_for(root, Path::new("/lore/characters/mira/self.md")), Scope::character("mira"));
        assert_eq!(scope_for(root, Path::new("/lore/worlds/saltmere/towns.md")).id.as_deref(), Some("saltmere"));
        assert_eq!(scope_for(root, Path::new("/lore/intro.md")), Scope::world());
    }
}
