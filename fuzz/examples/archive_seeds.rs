//! Write the archive target's seed inputs (`seeds/archive/`) from an archive made by the
//! real writer: `cargo run --example archive_seeds` (in `fuzz/`).

fn main() -> Result<(), String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/archive");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, bytes) in evolve_fuzz::archive::seeds()? {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
