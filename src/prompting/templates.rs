//! Prompt templates (minijinja) loaded from the `prompts/` folder, so a game master can
//! read and change every word the agents are given without rebuilding.

use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the prompt folder {0} does not exist")]
    MissingDir(PathBuf),
    #[error("prompt template {name}: {message}")]
    Render { name: String, message: String },
}

/// The prompt templates of one folder. Undefined variables are errors, so a typo in a
/// template cannot silently drop a block from a prompt.
pub struct PromptTemplates {
    env: minijinja::Environment<'static>,
    dir: PathBuf,
}

impl PromptTemplates {
    pub fn load(dir: &Path) -> Result<Self, TemplateError> {
        if !dir.is_dir() {
            return Err(TemplateError::MissingDir(dir.to_path_buf()));
        }
        let mut env = minijinja::Environment::new();
        env.set_loader(minijinja::path_loader(dir));
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        Ok(Self { env, dir: dir.to_path_buf() })
    }

    /// The shipped `prompts/` folder (or `LOREKEEPER_PROMPTS_DIR`).
    pub fn shipped() -> Result<Self, TemplateError> {
        Self::load(&crate::paths::prompts_dir())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Render `name` (a path relative to the folder, e.g. `companion/packet.j2`).
    pub fn render(&self, name: &str, context: impl Serialize) -> Result<String, TemplateError> {
        let error = |e: minijinja::Error| TemplateError::Render { name: name.to_string(), message: describe(&e) };
        let template = self.env.get_template(name).map_err(error)?;
        template.render(context).map_err(error)
    }
}

/// minijinja's error with its causes on one line.
fn describe(error: &minijinja::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_includes_and_rejects_undefined_variables() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x/part.j2"), "<lore>{{ lore }}</lore>").unwrap();
        std::fs::write(dir.path().join("x/main.j2"), "Hello {{ name }}. {% include 'x/part.j2' %}\n").unwrap();
        let t = PromptTemplates::load(dir.path()).unwrap();
        let out = t.render("x/main.j2", serde_json::json!({"name": "Mira", "lore": "the tower"})).unwrap();
        assert_eq!(out, "Hello Mira. <lore>the tower</lore>\n");
        let err = t.render("x/main.j2", serde_json::json!({"name": "Mira"})).unwrap_err();
        assert!(err.to_string().contains("x/main.j2"), "{err}");
        assert!(PromptTemplates::load(&dir.path().join("nope")).is_err());
        assert!(t.render("missing.j2", ()).is_err());
    }
}
