//! Packing loose objects (what `git gc` does, minus pruning). Materializing
//! from a pack costs no system call per object, where each loose object costs
//! five (access, open, fstat, read, close): for a 1,000-file parent that is
//! most of a checkout's object-reading time.

use std::fs::{self, File};
use std::path::Path;

use git2::{Oid, Repository};

use crate::error::{Error, git, io};

/// Pack every loose object into one new pack, make it durable, then delete
/// the loose copies. Returns how many objects were packed.
pub(crate) fn pack_loose(repo: &Repository) -> Result<usize, Error> {
    let objects = repo.path().join("objects");
    let loose = list_loose(&objects)?;
    if loose.is_empty() {
        return Ok(0);
    }
    let mut pb = repo.packbuilder().map_err(git("starting a pack builder"))?;
    for (id, _) in &loose {
        pb.insert_object(*id, None)
            .map_err(|e| git(format!("adding object {id} to a pack"))(e))?;
    }
    let pack_dir = objects.join("pack");
    pb.write(&pack_dir, 0o444)
        .map_err(git(format!("writing a pack into {}", pack_dir.display())))?;
    let name = pb
        .name()
        .ok_or_else(|| Error::NotFound("the name of the pack just written".into()))?
        .to_string();
    // libgit2 does not fsync by default; the loose copies go away next, so
    // the pack must be on disk first.
    for ext in ["pack", "idx"] {
        let p = pack_dir.join(format!("pack-{name}.{ext}"));
        sync(&p)?;
    }
    sync(&pack_dir)?;
    repo.odb()
        .and_then(|odb| odb.refresh())
        .map_err(git("rescanning packs"))?;
    for (_, path) in &loose {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(path, "removing packed loose object")(e)),
        }
    }
    // Empty fan-out directories are harmless; remove them quietly (a
    // concurrent writer may just have added an object to one).
    for fan in loose.iter().filter_map(|(_, p)| p.parent()) {
        let _ = fs::remove_dir(fan);
    }
    Ok(loose.len())
}

/// Loose objects: `objects/<2 hex>/<38 hex>`.
fn list_loose(objects: &Path) -> Result<Vec<(Oid, std::path::PathBuf)>, Error> {
    let mut out = Vec::new();
    for fan in fs::read_dir(objects).map_err(io(objects, "listing"))? {
        let fan = fan.map_err(io(objects, "listing"))?;
        let fan_name = fan.file_name();
        let Some(prefix) = fan_name.to_str().filter(|n| is_hex(n, 2)) else {
            continue;
        };
        let fan_path = fan.path();
        for obj in fs::read_dir(&fan_path).map_err(io(&fan_path, "listing"))? {
            let obj = obj.map_err(io(&fan_path, "listing"))?;
            let obj_name = obj.file_name();
            let Some(rest) = obj_name.to_str().filter(|n| is_hex(n, 38)) else {
                continue; // temporary files of an interrupted write
            };
            if let Ok(id) = Oid::from_str(&format!("{prefix}{rest}")) {
                out.push((id, obj.path()));
            }
        }
    }
    Ok(out)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn sync(path: &Path) -> Result<(), Error> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path, "syncing"))
}
