//! Turning records, summaries and events into JSON objects (their shapes are
//! `acpx_runtime::record_json`'s, their readable text `acpx_runtime::transcript`'s).

/// The JSON shapes of records and summaries are `acpx_runtime::record_json`'s.
pub use acpx_runtime::record_json::{
    action, identity, record_identity, record_show_json, summary_json,
};
/// The readable text of records and events is `acpx_runtime::transcript`'s.
pub use acpx_runtime::transcript::{clip, event_line};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_leaves_out_unknown_agent_session_id() {
        let m = identity("r", "a", None);
        assert_eq!(m.len(), 2);
        let m = identity("r", "a", Some(""));
        assert!(m.get("agentSessionId").is_none());
        let m = identity("r", "a", Some("n"));
        assert_eq!(m["agentSessionId"], "n");
    }

    #[test]
    fn clip_cuts_on_characters() {
        assert_eq!(clip("héllo wörld", 5), "héllo…");
        assert_eq!(clip("a\nb", 5), "a b");
    }
}
