//! The config files as the settings read them: the merge of the global and the project file,
//! and the refusals that name the file and the key.

use super::load_config;
use crate::config_file::{OutputFormat as Format, TEMPLATE};

#[test]
fn project_wins_and_agents_merge() {
    let home = tempfile::tempdir().unwrap();
    let proj = tempfile::tempdir().unwrap();
    std::fs::create_dir(proj.path().join(".git")).unwrap();
    let sub = proj.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(
        home.path().join("config.json"),
        r#"{"format":"json","timeout":5,"agents":{"x":{"command":"x-agent"},"y":"y-agent"}}"#,
    )
    .unwrap();
    std::fs::write(
        proj.path().join(".acpxrc.json"),
        r#"{"format":"quiet","agents":{"x":{"argv":["x agent","--acp"]}},"ttl":0}"#,
    )
    .unwrap();
    let c = load_config(home.path(), &sub).unwrap();
    assert_eq!(c.format, Some(Format::Quiet));
    assert_eq!(c.timeout, Some(5.0));
    assert_eq!(c.agents["x"], "'x agent' --acp");
    assert_eq!(c.agents["y"], "y-agent");
    assert_eq!(c.files.len(), 2);
    assert!(c.unknown_keys.is_empty());
    assert_eq!(c.ttl, Some(0));
}

#[test]
fn invalid_values_name_file_and_key() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (doc, key) in [
        (r#"{"timeout":-1}"#, "timeout"),
        (r#"{"store":"mongo"}"#, "store"),
        (r#"{"ttl":-5}"#, "ttl"),
        (r#"{"queueMaxDepth":0}"#, "queueMaxDepth"),
        (r#"{"noOwner":"yes"}"#, "noOwner"),
        (r#"{"defaultPermissions":"yes"}"#, "defaultPermissions"),
        (r#"{"agents":{"a":{"argv":[]}}}"#, "agents.a.argv"),
        (r#"[1]"#, "."),
    ] {
        std::fs::write(home.path().join("config.json"), doc).unwrap();
        let e = load_config(home.path(), cwd.path()).unwrap_err();
        assert!(e.message.contains("config.json"), "{e}");
        assert!(e.message.contains(&format!("`{key}`")), "{e}");
    }
}

#[test]
fn the_template_loads_without_warnings() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.json"), TEMPLATE).unwrap();
    let c = load_config(home.path(), home.path()).unwrap();
    assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
    assert_eq!(c.ttl, Some(300));
    assert_eq!(c.queue_max_depth, Some(16));
}
