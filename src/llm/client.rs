//! [`LlmClient`]: a provider wrapped with the policies every call needs.

use super::{CallContext, ChatRequest, Completion, LlmError, Provider, ProviderProfile};
use crate::store::Store;
use std::sync::Arc;

/// A provider plus retries, rate limiting and the response cache, built from a profile.
#[derive(Clone)]
pub struct LlmClient {
    provider: Arc<dyn Provider>,
    profile: ProviderProfile,
}

impl LlmClient {
    /// Build the client for `profile`. `store` backs the response cache when the
    /// profile enables it.
    pub fn from_profile(profile: &ProviderProfile, _store: Option<&Store>) -> Result<Self, LlmError> {
        Err(LlmError::Config(format!("provider kind {:?} is not available in this build", profile.kind.label())))
    }

    pub fn with_provider(provider: Arc<dyn Provider>, profile: ProviderProfile) -> Self {
        Self { provider, profile }
    }

    pub fn profile(&self) -> &ProviderProfile {
        &self.profile
    }

    pub fn describe(&self) -> String {
        self.provider.describe()
    }

    /// One logical call: the profile's model and sampler fill what the request leaves
    /// empty, then the provider is asked.
    pub fn complete(&self, request: &ChatRequest, ctx: CallContext<'_>) -> Result<Completion, LlmError> {
        let mut request = request.clone();
        if request.model.is_empty() {
            request.model = self.profile.model.clone();
        }
        self.provider.complete(&request, ctx)
    }
}
