//! The shim looks for its registry where the CLI does: an empty `GPUBPF_HOME` means the
//! default registry for both (`registry::default_home()`), so that `GPUBPF_HOME= gpubpf
//! load …` and `GPUBPF_HOME= app` meet.

mod common;

use std::path::Path;

use common::cli::{gpubpf, ok_json};
use common::shim::session;

#[test]
fn an_empty_gpubpf_home_is_the_default_registry_for_the_shim_too() {
    let Some(session) = session() else {
        return;
    };
    let show = std::process::Command::new(gpubpf())
        .args(["-j", "registry", "show"])
        .env("GPUBPF_HOME", "")
        .output()
        .expect("run gpubpf registry show");
    let show = ok_json(&show);
    let default = show["home"].as_str().expect("home").to_string();
    if show["exists"].as_bool() != Some(false) {
        // The shim would open this machine's own default registry: leave it alone.
        eprintln!("skipped: a registry exists at {default}");
        return;
    }
    let mock = session.mock;
    let out = mock
        .command(&mock.app_link, Path::new(""))
        .args(["link", "count", "1", "0"])
        .env("GPUBPF_LOG", "info")
        .output()
        .expect("run the mock application");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("no gpubpf registry yet"))
        .unwrap_or_else(|| panic!("no line about the missing registry: {err}"));
    assert!(
        line.contains(&format!("home={default} ")) || line.ends_with(&format!("home={default}")),
        "the shim looked elsewhere than {default}: {line}"
    );
}
