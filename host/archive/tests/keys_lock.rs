//! Key files and the run lock.

use crate::common;
use std::os::unix::fs::PermissionsExt;

use common::*;
use evolve_archive::{ExperimentKey, KeyError, LockError, PublicKey, RunLock};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn key_create_load_and_public_key_round_trip() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("evolve/keys/exp-1.key");
    let k = ExperimentKey::create(&path, EXP).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let again = ExperimentKey::load(&path, EXP).unwrap();
    assert_eq!(again.key_id(), k.key_id());
    assert_eq!(
        k.key_id(),
        evolve_archive::sha256_hex(
            &evolve_archive::canonical::unhex::<32>(&k.public().hex()).unwrap()
        )
    );
    assert!(matches!(
        ExperimentKey::create(&path, EXP),
        Err(KeyError::Exists(_))
    ));
    assert!(matches!(
        ExperimentKey::load(&path, "exp-2"),
        Err(KeyError::Invalid { .. })
    ));

    let ws = tempfile::tempdir().unwrap();
    let pubp = ws.path().join("keys/archive.pub");
    k.public().write(&pubp).unwrap();
    let p = PublicKey::load(&pubp).unwrap();
    assert_eq!(p, k.public());
    let sig = k.sign_receipt(3, &"a".repeat(64));
    assert!(p.verify_receipt(3, &"a".repeat(64), &sig));
    assert!(!p.verify_receipt(4, &"a".repeat(64), &sig));
    assert!(!p.verify_receipt(3, &"b".repeat(64), &sig));
    assert!(!p.verify_receipt(3, &"a".repeat(64), "zz"));
    // A public key file whose key_id does not match its key is refused.
    let text = std::fs::read_to_string(&pubp)
        .unwrap()
        .replace(k.key_id(), &"0".repeat(64));
    std::fs::write(&pubp, text).unwrap();
    assert!(PublicKey::load(&pubp).is_err());
}

#[test]
fn key_file_readable_by_others_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("k.key");
    ExperimentKey::create(&path, EXP).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = ExperimentKey::load(&path, EXP).unwrap_err();
    assert!(
        matches!(err, KeyError::InsecurePermissions { mode: 0o644, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("0644") && err.to_string().contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(
        ExperimentKey::load(&path, EXP),
        Err(KeyError::InsecurePermissions { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(ExperimentKey::load(&path, EXP).is_ok());
    // A symlink to a key is refused.
    let link = home.path().join("link.key");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(matches!(
        ExperimentKey::load(&link, EXP),
        Err(KeyError::Invalid { .. })
    ));
}

#[test]
fn second_lock_in_this_process_is_refused_until_released() {
    let ws = tempfile::tempdir().unwrap();
    let lock = RunLock::acquire(ws.path()).unwrap();
    assert_eq!(lock.path(), ws.path().join(".evolve/run.lock"));
    let err = RunLock::acquire(ws.path()).unwrap_err();
    assert!(
        matches!(err, LockError::Held { pid: Some(p), .. } if p == std::process::id()),
        "{err}"
    );
    drop(lock);
    let _again = RunLock::acquire(ws.path()).unwrap();
}

#[test]
fn lock_file_of_a_dead_process_does_not_block() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".evolve")).unwrap();
    // A process that took the lock, wrote its pid and died.
    let path = ws.path().join(".evolve/run.lock");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9>>'{}' && flock -n 9 && echo $$ > '{}'",
            path.display(),
            path.display()
        ))
        .status();
    if !matches!(&status, Ok(s) if s.success()) {
        std::fs::write(&path, "4194304\n").unwrap();
    }
    assert!(!std::fs::read_to_string(&path).unwrap().is_empty());
    let lock = RunLock::acquire(ws.path()).unwrap();
    assert_eq!(
        std::fs::read_to_string(lock.path()).unwrap(),
        format!("{}\n", std::process::id())
    );
}

#[test]
fn lock_held_by_another_process_blocks() {
    if std::process::Command::new("flock")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no flock(1)");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".evolve")).unwrap();
    let path = ws.path().join(".evolve/run.lock");
    let ready = ws.path().join("ready");
    // One process (sh exec'ing into sleep) holds the lock on its own descriptor.
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 9>>'{}' && flock -n 9 && touch '{}' && exec sleep 30",
            path.display(),
            ready.display()
        ))
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !ready.exists() && t0.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let held = RunLock::acquire(ws.path());
    assert!(matches!(held, Err(LockError::Held { .. })), "{held:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The holder died: the kernel released its lock.
    RunLock::acquire(ws.path()).unwrap();
}
