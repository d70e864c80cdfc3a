//! The cache keeps what was saved: round trips, the faster of two
//! measurements, corrupt files set aside, concurrent writers.

use std::path::PathBuf;

use serde_json::json;
use tilefuse_ir::{DType, Fusion, UnaryOp};
use tilefuse_params::SchedulerKind;
use tilefuse_runtime::Device;
use tilefuse_tune::{Bundle, Cache, CacheKey, Entry, Family, Origin, Written, nearest};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tilefuse-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn exp(n: usize, op: UnaryOp) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(&[n], DType::F32, Some("x")).unwrap();
    let y = f.unary(op, x).unwrap();
    f.output(y).unwrap();
    f
}

fn key(n: usize) -> CacheKey {
    CacheKey::new(
        &exp(n, UnaryOp::Exp),
        SchedulerKind::Pointwise,
        &Device::cpu().info(),
    )
}

/// A winner for `f` on `device`, its params marked with `n`.
fn winner(f: &Fusion, device: &tilefuse_sched::DeviceInfo, n: usize) -> Entry {
    let key = CacheKey::new(f, SchedulerKind::Pointwise, device);
    let mut e = Entry::measured(key, json!({"scheduler": "pointwise", "vectorize": n}), 1e-3);
    e.family = Family::of(f);
    e
}

#[test]
fn warm_start_serves_the_family_on_the_same_device_nearest_first() {
    let cpu = Device::cpu().info();
    let mut other = cpu.clone();
    other.cores += 1;
    let entries = [
        winner(&exp(1 << 10, UnaryOp::Exp), &cpu, 1),
        winner(&exp(1 << 21, UnaryOp::Exp), &cpu, 2),
        winner(&exp(1 << 16, UnaryOp::Exp), &cpu, 3),
        winner(&exp(1 << 16, UnaryOp::Exp), &other, 4),
        winner(&exp(1 << 16, UnaryOp::Tanh), &cpu, 5),
        // An entry from before warm start: no family, never served.
        Entry::measured(key(1 << 17), json!({"vectorize": 6}), 1e-3),
    ];
    let tuned = exp(1 << 18, UnaryOp::Exp);
    let k = CacheKey::new(&tuned, SchedulerKind::Pointwise, &cpu);
    let found = nearest(&entries, &k, &Family::of(&tuned), 4);
    let marks: Vec<_> = found
        .iter()
        .map(|e| e.params["vectorize"].clone())
        .collect();
    assert_eq!(marks, [json!(3), json!(2), json!(1)]);
    assert_eq!(nearest(&entries, &k, &Family::of(&tuned), 1).len(), 1);
}

#[test]
fn an_entry_round_trips_and_the_faster_measurement_stays() {
    let cache = Cache::open(temp_dir("roundtrip")).unwrap();
    let k = key(64);
    assert!(cache.get(&k).entry.is_none());
    let slow = Entry::measured(k.clone(), json!({"scheduler": "pointwise"}), 2e-3);
    assert_eq!(cache.put(&slow).unwrap().0, Written::Stored);
    let fast = Entry::measured(
        k.clone(),
        json!({"scheduler": "pointwise", "unroll_factor_inner": 2}),
        1e-3,
    );
    assert_eq!(cache.put(&fast).unwrap().0, Written::Stored);
    assert_eq!(cache.put(&slow).unwrap().0, Written::KeptFaster);
    assert_eq!(cache.get(&k).entry.unwrap(), fast);
    // Another key is another entry; a different device never matches.
    assert!(cache.get(&key(128)).entry.is_none());
    let mut other = k.clone();
    other.device.name = "another device".into();
    assert!(cache.get(&other).entry.is_none());
    assert_eq!(other.differences(&k), ["device.name"]);
    assert_eq!(cache.clear().unwrap(), 1);
}

#[test]
fn a_corrupt_entry_is_set_aside_with_a_warning() {
    let dir = temp_dir("corrupt");
    let cache = Cache::open(&dir).unwrap();
    let k = key(64);
    let path = dir.join(format!("{}.json", k.file_stem()));
    std::fs::write(&path, "{ not json").unwrap();
    let lookup = cache.get(&k);
    assert!(lookup.entry.is_none());
    assert!(
        lookup.warnings[0].contains("not a valid entry"),
        "{:?}",
        lookup.warnings
    );
    assert!(!path.exists(), "the corrupt file is moved aside");
    // The cache goes on working.
    let e = Entry::measured(k.clone(), json!({"scheduler": "pointwise"}), 1e-3);
    cache.put(&e).unwrap();
    assert_eq!(cache.get(&k).entry.unwrap(), e);
}

#[test]
fn entries_from_an_older_version_load_with_defaults() {
    let dir = temp_dir("old");
    let cache = Cache::open(&dir).unwrap();
    let k = key(64);
    let minimal = json!({"key": k, "params": {"scheduler": "pointwise"}, "best_time": 1e-3});
    std::fs::write(
        dir.join(format!("{}.json", k.file_stem())),
        minimal.to_string(),
    )
    .unwrap();
    let e = cache.get(&k).entry.unwrap();
    assert_eq!((e.trials, e.samples.len()), (0, 0));
}

#[test]
fn concurrent_writers_keep_every_entry_and_the_fastest_of_each() {
    let cache = Cache::open(temp_dir("threads")).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let cache = cache.clone();
            s.spawn(move || {
                for n in 1..=16 {
                    let time = 1e-3 * (1.0 + ((t * 7 + n) % 8) as f64);
                    let e = Entry::measured(key(n), json!({"scheduler": "pointwise"}), time);
                    cache.put(&e).unwrap();
                }
            });
        }
    });
    let (entries, warnings) = cache.entries().unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(entries.len(), 16);
    assert!(
        entries.iter().all(|e| e.best_time == 1e-3),
        "the fastest stays"
    );
}

#[test]
fn bundles_export_merge_and_import_keeping_the_right_entry() {
    let dir = temp_dir("bundle");
    let cache = Cache::open(dir.join("a")).unwrap();
    let params = json!({"scheduler": "pointwise"});
    cache
        .put(&Entry::measured(key(1), params.clone(), 3e-3))
        .unwrap();
    cache
        .put(&Entry::measured(key(2), params.clone(), 1e-3))
        .unwrap();
    let (mut a, warnings) = Bundle::export(&cache).unwrap();
    assert!(warnings.is_empty());
    let path = dir.join("a.json");
    a.save(&path).unwrap();
    let loaded = Bundle::load(&path).unwrap();
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded.get(&key(1)), cache.get(&key(1)).entry.as_ref());

    // Merging keeps the faster entry of each key, and adds new keys.
    let mut b = Bundle::default();
    b.add(Entry::measured(key(1), params.clone(), 2e-3));
    b.add(Entry::measured(key(2), params.clone(), 5e-3));
    b.add(Entry::measured(key(3), params.clone(), 1e-3));
    a.merge(b);
    let times: Vec<f64> = [1, 2, 3].map(|n| a.get(&key(n)).unwrap().best_time).into();
    assert_eq!(times, [2e-3, 1e-3, 1e-3]);

    // Importing marks entries imported; a measurement made here stays
    // whatever its time, and replaces an imported one even when slower.
    let (stored, _) = a.import_into(&cache).unwrap();
    assert_eq!(stored, 1, "only key 3 was new");
    let got = cache.get(&key(3)).entry.unwrap();
    assert_eq!(got.origin, Origin::Imported);
    assert_eq!(cache.get(&key(1)).entry.unwrap().origin, Origin::Measured);
    let slower_here = Entry::measured(key(3), params, 9e-3);
    assert_eq!(cache.put(&slower_here).unwrap().0, Written::Stored);
    assert_eq!(cache.get(&key(3)).entry.unwrap().origin, Origin::Measured);
}

#[test]
fn a_file_that_is_not_a_bundle_is_a_clear_error() {
    let dir = temp_dir("notbundle");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.json");
    std::fs::write(
        &path,
        r#"{"format": "something else", "version": 1, "entries": []}"#,
    )
    .unwrap();
    let err = Bundle::load(&path).unwrap_err().to_string();
    assert!(err.contains("not a tilefuse-cache-bundle"), "{err}");
    std::fs::write(&path, "[1, 2").unwrap();
    let err = Bundle::load(&path).unwrap_err().to_string();
    assert!(err.contains("x.json"), "{err}");
}

#[test]
fn prune_removes_only_what_can_never_be_served() {
    let dir = temp_dir("prune");
    let cache = Cache::open(&dir).unwrap();
    let current = Entry::measured(key(64), json!({"scheduler": "pointwise"}), 1e-3);
    let mut old = key(128);
    old.codegen_version -= 1;
    assert!(current.key.is_current() && !old.is_current());
    let stale = Entry::measured(old, json!({"scheduler": "pointwise"}), 1e-3);
    for e in [&current, &stale] {
        cache.put(e).unwrap();
    }
    let write = |name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, "{").unwrap();
        std::fs::File::options().write(true).open(&path).unwrap()
    };
    write("a.corrupt-12");
    write(".b.1.2.tmp"); // a writer at work
    let dead = write(".c.1.2.tmp");
    let hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    dead.set_modified(hours_ago).unwrap();

    assert_eq!(cache.prune().unwrap(), 1);
    let mut left: Vec<String> = (std::fs::read_dir(&dir).unwrap())
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let stem = current.key.file_stem();
    assert_eq!(
        left,
        [
            ".b.1.2.tmp".to_owned(),
            format!("{stem}.json"),
            format!("{stem}.lock")
        ]
    );
    assert_eq!(cache.get(&current.key).entry, Some(current));
}
