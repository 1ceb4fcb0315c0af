//! API keys kept in the OS keyring (the Secret Service on Linux), one entry per profile.
//!
//! A key typed into the workbench or piped to `lorekeeper providers key set` goes here
//! and nowhere else: never into the config, the library, a log or an event. An
//! environment variable still wins over it (see `client::resolve_key`), so a script or
//! a headless machine keeps working exactly as before.
//!
//! The keyring is reached behind [`KeyStore`], installed once per process by the front
//! door ([`install`]): the binary installs the OS keyring, tests an in-memory store
//! ([`CoreKeyStore::in_memory`]), and a process with none installed reads keys from the
//! environment only. Every call to the OS keyring is bounded ([`KEYRING_TIMEOUT`]): a
//! D-Bus service that never answers would otherwise hang whoever asked. A keyring that
//! failed or did not answer is not asked again for a while ([`RETRY_AFTER`]), so a
//! machine without one pays the wait once, not on every call.

use crate::llm::Secret;
use keyring_core::{CredentialStore, Entry};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The service name every Lorekeeper entry is filed under; the profile name is the user.
pub const SERVICE: &str = "lorekeeper";

/// How long one keyring call may take before it counts as "no keyring".
pub const KEYRING_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a keyring that failed is left alone before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// No keyring service answers: a headless machine, or no Secret Service running.
    #[error("no keyring available ({0}); keys come from environment variables only")]
    Unavailable(String),
    /// The keyring answered but refused or failed this one call.
    #[error("the keyring failed: {0}")]
    Failed(String),
}

/// Where keys are kept, by profile name.
pub trait KeyStore: Send + Sync {
    /// The key stored for `profile`, if any.
    fn get(&self, profile: &str) -> Result<Option<Secret>, KeyringError>;
    /// Store `key` for `profile`, replacing any earlier one.
    fn set(&self, profile: &str, key: &Secret) -> Result<(), KeyringError>;
    /// Remove the key of `profile`; `true` when there was one.
    fn delete(&self, profile: &str) -> Result<bool, KeyringError>;
    /// What this store is, for messages ("the Secret Service", "an in-memory store").
    fn describe(&self) -> String;
}

static INSTALLED: RwLock<Option<Arc<dyn KeyStore>>> = RwLock::new(None);

/// Make `store` the keyring of this process.
pub fn install(store: Arc<dyn KeyStore>) {
    *INSTALLED.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
}

/// The keyring of this process, if a front door installed one.
pub fn installed() -> Option<Arc<dyn KeyStore>> {
    INSTALLED.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Install the OS keyring (the Secret Service over D-Bus, in pure Rust). Nothing is
/// contacted yet: the first call connects, under [`KEYRING_TIMEOUT`].
pub fn install_os_keyring() {
    install(Arc::new(CoreKeyStore::os()));
}

/// The key stored for `profile` in the installed keyring; `None` when there is no
/// keyring, no key, or the keyring failed (logged once per failure, never with a key).
pub fn stored_key(profile: &str) -> Option<Secret> {
    let store = installed()?;
    match store.get(profile) {
        Ok(key) => key,
        Err(e) => {
            tracing::debug!(profile, error = %e, "no key from the keyring");
            None
        }
    }
}

type Opener = dyn Fn() -> Result<Arc<CredentialStore>, keyring_core::Error> + Send + Sync;

/// A [`KeyStore`] over a `keyring-core` credential store: the Secret Service in the
/// app, `keyring-core`'s in-memory mock store in tests (the same code path either way).
pub struct CoreKeyStore {
    open: Arc<Opener>,
    /// The store, once opened (opening the Secret Service connects to D-Bus).
    store: Arc<Mutex<Option<Arc<CredentialStore>>>>,
    /// Why the keyring is being left alone, and since when.
    down: Mutex<Option<(Instant, KeyringError)>>,
    timeout: Duration,
    label: &'static str,
}

impl CoreKeyStore {
    /// The OS keyring: the Secret Service on Linux and the BSDs.
    pub fn os() -> Self {
        Self::with_opener("the Secret Service keyring", KEYRING_TIMEOUT, || {
            let store: Arc<CredentialStore> = zbus_secret_service_keyring_store::Store::new()?;
            Ok(store)
        })
    }

    /// A store that keeps keys in this process's memory only: for tests, and for
    /// checking the workbench's key flow where no keyring service runs.
    pub fn in_memory() -> Self {
        let store: Arc<CredentialStore> = keyring_core::mock::Store::new().expect("the mock store never fails to build");
        Self::with_opener("an in-memory keyring", KEYRING_TIMEOUT, move || Ok(store.clone()))
    }

    /// A store opened by `open`, each call bounded by `timeout`.
    pub fn with_opener(
        label: &'static str,
        timeout: Duration,
        open: impl Fn() -> Result<Arc<CredentialStore>, keyring_core::Error> + Send + Sync + 'static,
    ) -> Self {
        Self { open: Arc::new(open), store: Arc::default(), down: Mutex::new(None), timeout, label }
    }

    /// Run `call` on the entry of `profile` on a thread of its own, and wait at most
    /// the timeout for it: a keyring that does not answer is reported, not waited on.
    fn bounded<T: Send + 'static>(
        &self,
        profile: &str,
        call: impl FnOnce(&Entry) -> Result<T, keyring_core::Error> + Send + 'static,
    ) -> Result<T, KeyringError> {
        if let Some((since, why)) = self.down.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
            && since.elapsed() < RETRY_AFTER
        {
            return Err(why.clone());
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (open, store, profile) = (self.open.clone(), self.store.clone(), profile.to_string());
        let spawned = std::thread::Builder::new().name("keyring".into()).spawn(move || {
            let outcome = (|| {
                let opened = {
                    let mut slot = store.lock().unwrap_or_else(|p| p.into_inner());
                    match slot.as_ref() {
                        Some(s) => s.clone(),
                        None => {
                            let s = open()?;
                            *slot = Some(s.clone());
                            s
                        }
                    }
                };
                let entry = opened.build(SERVICE, &profile, None)?;
                call(&entry)
            })();
            let _ = tx.send(outcome);
        });
        if let Err(e) = spawned {
            return Err(KeyringError::Failed(format!("cannot start a thread: {e}")));
        }
        let result = match rx.recv_timeout(self.timeout) {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => classify(e),
            Err(_) => KeyringError::Unavailable(format!("{} did not answer within {} s", self.label, self.timeout.as_secs())),
        };
        if matches!(result, KeyringError::Unavailable(_)) {
            tracing::warn!(error = %result, "keyring unavailable");
            *self.down.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), result.clone()));
        }
        Err(result)
    }
}

/// A `keyring-core` error as ours. `BadEncoding` and `BadDataFormat` carry the stored
/// bytes, which may be a key: their text is never used.
fn classify(e: keyring_core::Error) -> KeyringError {
    use keyring_core::Error as E;
    match e {
        E::NoStorageAccess(inner) | E::PlatformFailure(inner) => KeyringError::Unavailable(inner.to_string()),
        E::NoDefaultStore => KeyringError::Unavailable("no credential store".into()),
        E::BadEncoding(_) | E::BadDataFormat(..) => KeyringError::Failed("the stored key is not valid text".into()),
        E::NoEntry => KeyringError::Failed("no such entry".into()),
        E::Ambiguous(_) => KeyringError::Failed("more than one keyring entry matches this profile".into()),
        E::TooLong(what, limit) => KeyringError::Failed(format!("the {what} is longer than the keyring's limit of {limit}")),
        other => KeyringError::Failed(other.to_string()),
    }
}

impl KeyStore for CoreKeyStore {
    fn get(&self, profile: &str) -> Result<Option<Secret>, KeyringError> {
        self.bounded(profile, |entry| match entry.get_password() {
            Ok(key) => Ok(Some(key)),
            Err(keyring_core::Error::NoEntry) => Ok(None),
            Err(e) => Err(e),
        })
        .map(|key| key.map(Secret::new).filter(|k| !k.expose().trim().is_empty()))
    }

    fn set(&self, profile: &str, key: &Secret) -> Result<(), KeyringError> {
        let key = key.clone();
        self.bounded(profile, move |entry| entry.set_password(key.expose()))
    }

    fn delete(&self, profile: &str) -> Result<bool, KeyringError> {
        self.bounded(profile, |entry| match entry.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring_core::Error::NoEntry) => Ok(false),
            Err(e) => Err(e),
        })
    }

    fn describe(&self) -> String {
        self.label.to_string()
    }
}

/// Where the key a profile would use comes from, as the front doors show it: the
/// variable's name or "the keyring", never the key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum KeySource {
    /// An environment variable (which wins over the keyring).
    Environment { var: String },
    /// The keyring's entry for the profile.
    Keyring,
    /// No key anywhere.
    None,
}

impl KeySource {
    /// One plain line for a status label.
    pub fn line(&self) -> String {
        match self {
            KeySource::Environment { var } => format!("key from ${var}"),
            KeySource::Keyring => "key stored in the keyring".into(),
            KeySource::None => "no key set".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_goes_in_comes_back_and_is_cleared() {
        let store = CoreKeyStore::in_memory();
        assert_eq!(store.get("remote").unwrap(), None);
        store.set("remote", &Secret::new("sk-in-memory-42")).unwrap();
        assert_eq!(store.get("remote").unwrap().map(|k| k.expose().to_string()).as_deref(), Some("sk-in-memory-42"));
        assert_eq!(store.get("other").unwrap(), None, "entries are per profile");
        assert!(store.delete("remote").unwrap());
        assert!(!store.delete("remote").unwrap());
        assert_eq!(store.get("remote").unwrap(), None);
    }

    #[test]
    fn a_keyring_that_never_answers_is_reported_in_time_and_then_left_alone() {
        let store = CoreKeyStore::with_opener("a stuck keyring", Duration::from_millis(200), || {
            std::thread::sleep(Duration::from_secs(3));
            Err(keyring_core::Error::NoDefaultStore)
        });
        let started = Instant::now();
        let err = store.get("remote").unwrap_err();
        assert!(matches!(&err, KeyringError::Unavailable(m) if m.contains("did not answer")), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The next call does not wait again.
        let again = Instant::now();
        assert_eq!(store.set("remote", &Secret::new("sk-x-1234")).unwrap_err(), err);
        assert!(again.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn no_session_bus_is_a_clear_unavailable_not_a_panic() {
        let store = CoreKeyStore::with_opener("the Secret Service keyring", Duration::from_secs(2), || {
            Err(keyring_core::Error::NoStorageAccess("no D-Bus session bus".into()))
        });
        let err = store.get("remote").unwrap_err();
        assert!(err.to_string().contains("no keyring available") && err.to_string().contains("environment variables"), "{err}");
    }
}
