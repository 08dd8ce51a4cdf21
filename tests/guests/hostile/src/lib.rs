//! A hostile controller: the prompt picks the attack.
//!
//! `fork-bomb DIGEST POLICY` spawns itself until refused ·
//! `loop` spins without host calls · `huge-failed` fails with a 4 MiB
//! message · `memory` allocates without end ·
//! `flood` emits without end · `giant` emits one 8 MiB event · `stack`
//! recurses without end · `trap` executes `unreachable` · `panic` panics ·
//! `disk` fills `artifacts/` · `logs` floods stdout · `wait` waits on a
//! decision forever · `escape` reads through a planted symlink and `..` ·
//! `nest` nests directories without end · `sparse` makes a 2 GiB sparse
//! file · `inodes` creates empty files without end · `files` holds files open without end · `bad-wait` sends decision requests the host must refuse · `count` finishes with
//! the number of entries its worktree holds · `loan-escape` (a child) tries
//! `..`, a planted `..` link and absolute paths out of its `/loan` ·
//! `residue` finishes with what it found left of an earlier instance in
//! its linear memory, then dirties it ·
//! `loan-probe` (a child of the loan race) finishes with `inside` when its
//! `/loan` is the scope, `no-loan` without one, `escaped: …` when it holds
//! anything else.
use cairn_guest::{Controller, Error, Outcome, Start};
use std::io::Write;

struct Hostile;

// Unbounded on purpose: the host must stop it at its stack limit.
#[allow(unconditional_recursion)]
#[inline(never)]
fn recurse(depth: u64, sink: &mut [u8; 256]) -> u64 {
    sink[(depth % 256) as usize] = depth as u8;
    let mut local = *sink;
    recurse(depth + 1, &mut local) + local[0] as u64
}

/// Zero in the module's image (`.bss`): the host must hand every instance
/// these bytes as zeros, whatever the instance before wrote.
static mut BSS: [u8; 256 << 10] = [0; 256 << 10];
/// Initialised in the image (`.data`): every instance sees sevens.
static mut DATA: [u8; 8 << 10] = [7; 8 << 10];

/// `residue`: what this instance finds left of an earlier one in its
/// linear memory — bytes of `.bss` not zero, of `.data` not as built, of a
/// fresh zeroed heap allocation not zero — then it dirties all three, so
/// the next instance in the same slot has something to find.
fn residue() -> String {
    // SAFETY: one thread; nothing else holds these statics.
    let (bss, data) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(BSS),
            &mut *core::ptr::addr_of_mut!(DATA),
        )
    };
    let bss_left = bss.iter().filter(|&&b| b != 0).count();
    let data_left = data.iter().filter(|&&b| b != 7).count();
    // Fresh pages from the allocator: `calloc` takes memory the module
    // just grew as zero and does not clear it itself.
    let mut heap = vec![0u8; 512 << 10];
    let heap_left = heap.iter().filter(|&&b| b != 0).count();
    bss.fill(0xAB);
    data.fill(0xCD);
    heap.fill(0xEE);
    std::hint::black_box(&heap);
    format!("bss {bss_left} data {data_left} heap {heap_left}")
}

impl Controller for Hostile {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_text(&format!("attack: {}", start.prompt))?;
        match start.prompt.as_str() {
            "loop" => {
                let mut x: u64 = 1;
                loop {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if x == 0 {
                        break;
                    }
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![7u8; 4 << 20]);
                }
            }
            "flood" => loop {
                cairn_guest::emit_text("flood")?;
            },
            "giant" => {
                cairn_guest::emit_text(&"g".repeat(8 << 20))?;
            }
            "stack" => {
                let mut sink = [0u8; 256];
                recurse(0, &mut sink);
            }
            "trap" => {
                #[cfg(target_arch = "wasm32")]
                core::arch::wasm32::unreachable();
            }
            "panic" => panic!("a hostile panic"),
            "disk" => {
                let chunk = vec![1u8; 1 << 20];
                for i in 0.. {
                    let mut f = std::fs::File::create(format!("fill-{}", i % 4096))
                        .map_err(|e| Error::new("io", e.to_string()))?;
                    f.write_all(&chunk)
                        .map_err(|e| Error::new("io", e.to_string()))?;
                }
            }
            "logs" => {
                let line = "x".repeat(4096);
                loop {
                    if writeln!(std::io::stdout(), "{line}").is_err() {
                        // Refused: keep trying, the host must stop us.
                    }
                }
            }
            "wait" => {
                let _ = cairn_guest::request_approval("wait forever");
            }
            "decisions" => loop {
                // Each wait journals a request, its route and its timeout.
                let _ = cairn_guest::request(
                    cairn_guest::RequestKind::Answer,
                    "again",
                    &serde_json::json!({}),
                    Some(0),
                    None,
                );
            },
            p if p.starts_with("fork-bomb ") => {
                // `fork-bomb DIGEST POLICY`: spawn itself until refused, each
                // child doing the same (POLICY: continue or cancel).
                let mut words = p.split(' ').skip(1);
                let (me, policy) = (
                    words.next().unwrap_or(""),
                    words.next().unwrap_or("continue"),
                );
                let liveness = match policy {
                    "cancel" => cairn_guest::workers::Liveness::Cancel,
                    _ => cairn_guest::workers::Liveness::Continue,
                };
                let mut made = 0;
                while cairn_guest::workers::spawn_with(me, p, None, liveness).is_ok() {
                    made += 1;
                }
                if policy == "cancel" {
                    // Outlive nothing: wait to be stopped with the tree.
                    let _ = cairn_guest::request_approval("hold");
                }
                return Ok(Outcome::Finished(format!("spawned {made}")));
            }
            "huge-failed" => {
                return Err(Error::new("huge", "x".repeat(4 << 20)));
            }
            "huge-answer" => {
                return Ok(Outcome::Finished("a".repeat(4 << 20)));
            }
            "huge-checkpoint" => {
                return Ok(Outcome::Parked(vec![7u8; 8 << 20]));
            }
            "deep" => {
                // A value nested past what any reader could parse back.
                let mut v = serde_json::json!(1);
                for _ in 0..126 {
                    v = serde_json::json!([v]);
                }
                match cairn_guest::emit_custom("deep", &v) {
                    Ok(_) => return Err(Error::new("accepted", "a 126-deep value was journaled")),
                    Err(e) => {
                        cairn_guest::emit_text(&format!("refused: {e:?}"))?;
                    }
                }
            }
            "escape" => {
                // Wait, so a test can plant links in this generation's directory.
                let _ = cairn_guest::request_approval("plant the links now");
                let mut reached = Vec::new();
                for target in [
                    "planted-link",
                    "planted-dir-link/secret.txt",
                    "../escaped-secret.txt",
                    "/planted-link",
                ] {
                    if let Ok(bytes) = std::fs::read(target) {
                        reached.push(format!("{target}: {}", String::from_utf8_lossy(&bytes)));
                    }
                }
                cairn_guest::emit_custom("escape", &serde_json::json!({ "reached": reached }))?;
                if !reached.is_empty() {
                    return Err(Error::new("escaped", reached.join("; ")));
                }
            }
            "loan-escape" => {
                // A child with a loaned scope tries to reach above it.
                // Wait, so a test can plant a `..` link in the loaned scope.
                let _ = cairn_guest::request_approval("plant the links now");
                let mut reached = Vec::new();
                for target in [
                    "/loan/../parent-secret.txt",
                    "/loan/up/parent-secret.txt",
                    "/loan/../../parent-secret.txt",
                    "/parent-secret.txt",
                    "loan/../parent-secret.txt",
                ] {
                    if let Ok(bytes) = std::fs::read(target) {
                        reached.push(format!("{target}: {}", String::from_utf8_lossy(&bytes)));
                    }
                }
                if std::fs::write("/loan/../pwned.txt", "pwned").is_ok() {
                    reached.push("wrote /loan/../pwned.txt".into());
                }
                let wrote = std::fs::write("/loan/inside.txt", "written through the loan").is_ok();
                cairn_guest::emit_custom(
                    "loan",
                    &serde_json::json!({ "reached": reached, "wrote_inside": wrote }),
                )?;
                if !reached.is_empty() {
                    return Err(Error::new("escaped", reached.join("; ")));
                }
                if !wrote {
                    return Err(Error::new("no_loan", "could not write inside /loan"));
                }
            }
            "loan-probe" => {
                let inside = std::fs::read_to_string("/loan/inside.txt").ok();
                let host: Vec<&str> = ["/loan/etc/passwd", "/loan/proc/self", "/loan/cairn.toml"]
                    .into_iter()
                    .filter(|p| std::fs::metadata(p).is_ok())
                    .collect();
                let listed = std::fs::read_dir("/loan").map(|d| d.count()).ok();
                let answer = match (inside.as_deref(), listed) {
                    _ if !host.is_empty() => format!("escaped: {}", host.join(", ")),
                    (Some("inside"), _) => "inside".to_string(),
                    (Some(other), _) => format!("escaped: /loan/inside.txt reads {other:?}"),
                    (None, None) => "no-loan".to_string(),
                    (None, Some(n)) => format!("escaped: /loan holds {n} entries, not the scope"),
                };
                return Ok(Outcome::Finished(answer));
            }
            "nest" => {
                let mut path = String::from("d");
                loop {
                    if std::fs::create_dir(&path).is_err() {
                        // Refused (a path too long): keep the tree, go on.
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        continue;
                    }
                    path.push_str("/d");
                }
            }
            "sparse" => {
                let f = std::fs::File::create("sparse.bin")
                    .map_err(|e| Error::new("io", e.to_string()))?;
                f.set_len(2 << 30)
                    .map_err(|e| Error::new("io", e.to_string()))?;
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            "inodes" => {
                for i in 0u64.. {
                    let _ = std::fs::File::create(format!("f-{i}"));
                }
            }
            "files" => {
                // Hold every file open: descriptors without end.
                let mut held = Vec::new();
                for i in 0u64.. {
                    if let Ok(f) = std::fs::File::create(format!("o-{}", i % 64)) {
                        held.push(f);
                    }
                }
                drop(held);
            }
            "bad-wait" => {
                // Invalid JSON through the raw binding, and a value nested
                // too deep through the SDK: each comes back refused, as a
                // value, and nothing is journaled for it.
                use cairn_guest::__bindings::cairn::controller::decisions as raw;
                let req = raw::Request {
                    kind: raw::RequestKind::Approval,
                    prompt: "bad".into(),
                    details: "{not json".into(),
                    timeout_ms: None,
                    default_value: Some("nor this".into()),
                };
                match raw::wait(&req) {
                    Err(raw::WaitError::Invalid(why)) => {
                        cairn_guest::emit_text(&format!("refused: {why}"))?;
                    }
                    Ok(_) => return Err(Error::new("accepted", "invalid JSON was taken")),
                }
                let mut v = serde_json::json!(1);
                for _ in 0..100 {
                    v = serde_json::json!([v]);
                }
                match cairn_guest::request(cairn_guest::RequestKind::Answer, "deep", &v, None, None)
                {
                    cairn_guest::Answer::Refused(why) => {
                        cairn_guest::emit_text(&format!("refused: {why}"))?;
                    }
                    other => return Err(Error::new("accepted", format!("{other:?}"))),
                }
            }
            "count" => {
                let n = std::fs::read_dir(".").map(|d| d.count()).unwrap_or(0);
                return Ok(Outcome::Finished(format!("{n} entries")));
            }
            "residue" => return Ok(Outcome::Finished(residue())),
            fill if fill.starts_with("fill ") => {
                // `fill KIB`: one file of KIB KiB, then finish.
                let kib = fill[5..].parse::<usize>().unwrap_or(0);
                std::fs::write("fill.bin", vec![3u8; kib << 10])
                    .map_err(|e| Error::new("io", e.to_string()))?;
            }
            "dirs" => {
                // Directories without end: each takes blocks of the disk.
                for i in 0u64.. {
                    std::fs::create_dir(format!("d-{i}"))
                        .map_err(|e| Error::new("io", format!("after {i} directories: {e}")))?;
                }
            }
            "links" => {
                // A file under the budget, and hard links to it that cost
                // the disk nothing but count as files of their own.
                std::fs::write("big.bin", vec![5u8; 5 << 20])
                    .map_err(|e| Error::new("io", e.to_string()))?;
                for i in 0..3 {
                    std::fs::hard_link("big.bin", format!("link-{i}.bin"))
                        .map_err(|e| Error::new("io", e.to_string()))?;
                }
            }
            emits if emits.starts_with("emits ") => {
                // `emits COUNT KIB`: COUNT texts of KIB KiB each.
                let mut words = emits
                    .split(' ')
                    .skip(1)
                    .map(|w| w.parse::<usize>().unwrap_or(0));
                let (count, kib) = (words.next().unwrap_or(0), words.next().unwrap_or(0));
                let text = "e".repeat(kib << 10);
                for _ in 0..count {
                    cairn_guest::emit_text(&text)?;
                }
            }
            other => return Err(Error::new("unknown_attack", other)),
        }
        Ok(Outcome::Finished("survived".into()))
    }
}

cairn_guest::controller!(Hostile);
