//! The `hostsim run`, `gen`, `replay` and `demo` commands through the binary: exit
//! statuses, outputs, and that a failure leaves `--out` untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hostsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hostsim"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn example(name: &str) -> String {
    format!(
        "{}/../examples/{name}/scenario.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A fresh temporary folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hostsim-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn run_writes_every_tensor_and_the_report() {
    let dir = scratch("run");
    let out = dir.join("out");
    let o = hostsim(&[
        "run",
        &example("embedding"),
        "--out",
        s(&out),
        "--queues",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("dma_scatter") && text.contains("total"),
        "{text}"
    );
    assert_eq!(
        files(&out),
        ["ids.npy", "out.npy", "report.json", "table.npy"]
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let op_keys: Vec<&String> = report["ops"][0].as_object().unwrap().keys().collect();
    assert_eq!(
        op_keys,
        [
            "bytes",
            "descriptors",
            "dge",
            "estimated_ns",
            "instructions",
            "mechanism",
            "oob_notifications",
            "oob_skipped",
            "op"
        ]
    );
    assert_eq!(report["ops"][1]["op"], "dma_scatter");
    // cayman's DMA_INDIRECT is indexed: the software DGE serves it
    assert_eq!(report["ops"][1]["dge"], "software");
    assert_eq!(report["total"]["oob_skipped"], 192);
    // the demo's gather notifies its skips (its bound register leaves the notification on)
    assert_eq!(report["ops"][0]["oob_notifications"], 1);
    assert_eq!(report["total"]["bytes"], 2_048_000);
    assert!(report["total"]["wall_seconds"].as_f64().unwrap() > 0.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_input_exits_2_pointing_at_the_line_and_writes_nothing() {
    let dir = scratch("invalid");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "generation = \"cayman\"\n[[tensor]]\nname = \"t\"\nspace = \"dram\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = hostsim(&["run", s(&bad), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("bad.toml:4:9:") && e.contains("dram"), "{e}");
    assert!(!out.exists());
    let o = hostsim(&["run", &example("embedding"), "--queues", "17"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("queues = 17: must be 1..=16"),
        "{}",
        stderr(&o)
    );
    let o = hostsim(&["run"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fault_exits_1_naming_the_index_and_leaves_out_untouched() {
    let dir = scratch("fault");
    std::fs::copy(
        format!(
            "{}/../examples/embedding/ids.npy",
            env!("CARGO_MANIFEST_DIR")
        ),
        dir.join("ids.npy"),
    )
    .unwrap();
    let text = std::fs::read_to_string(example("embedding")).unwrap();
    let hard = text.replacen("oob   = \"skip\"", "oob   = \"error\"", 1);
    assert_ne!(hard, text);
    std::fs::write(dir.join("hard.toml"), hard).unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let o = hostsim(&["run", s(&dir.join("hard.toml")), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("op 0 (dma_gather src=table index=ids dst=out) failed while running"),
        "{e}"
    );
    assert!(
        e.contains("src index 1000 at position 4000 is out of bounds (bound 1000)"),
        "{e}"
    );
    assert_eq!(files(&out), ["keep.txt"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_ap_copy_s_oob_index_exits_1_and_a_bad_pattern_exits_2_writing_nothing() {
    let dir = scratch("ap-fault");
    let src = format!("{}/../examples/embedding_tile", env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(format!("{src}/idx.npy"), dir.join("idx.npy")).unwrap();
    let text = std::fs::read_to_string(format!("{src}/scenario.toml")).unwrap();
    let hard = text.replacen("oob = \"skip\"", "oob = \"error\"", 1);
    assert_ne!(hard, text);
    std::fs::write(dir.join("hard.toml"), hard).unwrap();
    let out = dir.join("out");
    let o = hostsim(&["run", s(&dir.join("hard.toml")), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    // position 5 of the (128, 1) i32 tile holds -1
    assert!(
        e.contains(
            "src index -1 at position 5 of idx is out of bounds for dim 0 of table (size 1000)"
        ),
        "{e}"
    );
    assert!(!out.exists());
    // rows of 64001 elements fit no row of the table: refused when lowered
    let bad = text.replacen(
        "ap = [[64, 128], [1, 64]]",
        "ap = [[64, 128], [1, 64001]]",
        1,
    );
    std::fs::write(dir.join("bad.toml"), bad).unwrap();
    let o = hostsim(&["run", s(&dir.join("bad.toml")), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("op 0 (dma_copy src=table dst=tile src.vector_offset=idx): dma_copy: src: ap[1] = [1, 64001] takes position [index 0, 64000] to element 64000, outside the 64000 elements of table"), "{e}");
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gen_then_replay_gives_the_run_s_tensors() {
    let dir = scratch("gen");
    let examples = [
        "embedding",
        "copy_update",
        "pool_gathers",
        "embedding_tile",
        "column_window",
        "copy_5d",
    ];
    for name in examples {
        let scenario = example(name);
        let queues = dir.join(format!("{name}.dmaq"));
        let o = hostsim(&["gen", &scenario, "-o", s(&queues), "--queues", "4"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            text.lines().filter(|l| l.starts_with("queue ")).count(),
            4,
            "{text}"
        );
        let replayed = dir.join(format!("{name}-replay"));
        let svg = dir.join(format!("{name}.svg"));
        let o = hostsim(&[
            "replay",
            s(&queues),
            "--scenario",
            &scenario,
            "--out",
            s(&replayed),
            "--timeline",
            s(&svg),
        ]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let picture = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(
            picture.matches("<svg").count(),
            1,
            "{name}: one SVG document"
        );
        assert!(picture.contains(">q3<"), "{name}: a lane per queue");
        for mechanism in ["dge", "reference"] {
            let ran = dir.join(format!("{name}-{mechanism}"));
            let o = hostsim(&["run", &scenario, "--mechanism", mechanism, "--out", s(&ran)]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            for f in files(&ran).iter().filter(|f| f.ends_with(".npy")) {
                let a = std::fs::read(ran.join(f)).unwrap();
                let b = std::fs::read(replayed.join(f)).unwrap();
                assert!(
                    a == b,
                    "{name}: {f} differs between replay and run --mechanism {mechanism}"
                );
            }
        }
    }
    let o = hostsim(&[
        "replay",
        s(&dir.join("missing.dmaq")),
        "--scenario",
        &example("embedding"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("missing.dmaq: the queue file cannot be opened: "),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `gen --generation G` records the queues of the scenario run on G (the file's header
/// says G); `replay` runs it over the scenario on G when told so, as `run --generation G`
/// does, and names the generations otherwise.
#[test]
fn gen_and_replay_take_the_generation_as_run_does() {
    let dir = scratch("gen-generation");
    let (scenario, queues) = (example("embedding"), dir.join("m.dmaq"));
    let o = hostsim(&[
        "gen",
        &scenario,
        "-o",
        s(&queues),
        "--generation",
        "mariana",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(" on mariana"));
    let file = dma::VerifiedQueueFile::open_path(&queues).unwrap();
    assert_eq!(file.header().generation(), dma::Generation::Mariana);
    let o = hostsim(&["replay", s(&queues), "--scenario", &scenario]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("mariana"), "{}", stderr(&o));
    let (replayed, ran) = (dir.join("replayed"), dir.join("ran"));
    let o = hostsim(&[
        "replay",
        s(&queues),
        "--scenario",
        &scenario,
        "--generation",
        "mariana",
        "--out",
        s(&replayed),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = hostsim(&[
        "run",
        &scenario,
        "--generation",
        "mariana",
        "--out",
        s(&ran),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let npys: Vec<String> = files(&ran)
        .into_iter()
        .filter(|f| f.ends_with(".npy"))
        .collect();
    assert!(!npys.is_empty());
    for f in npys {
        let (a, b) = (ran.join(&f), replayed.join(&f));
        assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap(), "{f}");
    }
    let o = hostsim(&["gen", &scenario, "-o", s(&queues), "--generation", "trn9"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_demo_runs_with_no_arguments_and_the_routes_agree() {
    let o = hostsim(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("agree: yes"), "{text}");
    assert!(text.contains("sunda      pool"), "{text}");
}

#[test]
fn every_command_s_help_has_an_example() {
    for cmd in [
        "run", "gen", "replay", "demo", "inspect", "isa", "fuzz", "bench",
    ] {
        let o = hostsim(&[cmd, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains(&format!("Example: hostsim {cmd}")),
            "{cmd}: {text}"
        );
    }
}

#[test]
fn without_a_terminal_stderr_stays_silent_v_shows_instructions_and_vv_the_dge_stages() {
    let dir = scratch("quiet");
    let queues = dir.join("q.dmaq");
    let scenario = example("copy_update");
    let runs: [Vec<&str>; 3] = [
        vec!["run", &scenario],
        vec!["gen", &scenario, "-o", s(&queues)],
        vec!["replay", s(&queues), "--scenario", &scenario],
    ];
    for args in &runs {
        let o = hostsim(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}: no progress bar into a pipe");
    }
    let stages = [
        "dge::generate: gen_spray_info",
        "dge::reshape: Tensor shape before Batman",
        "dge::indirection:",
        "dma::engine::exec: unit done unit=",
    ];
    let instruction = "scenario_op{index=1 op=\"embedding_update\"}";
    let done = "hostsim::runtime: instruction done bytes=";
    let o = hostsim(&["-v", "run", &scenario]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(instruction) && e.contains(done), "-v: {e}");
    assert!(e.contains(" DEBUG ") && !e.contains(" TRACE "), "-v: {e}");
    for stage in stages {
        assert!(!e.contains(stage), "{stage} in -v output");
    }
    let o = hostsim(&["-vv", "run", &scenario]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(" TRACE "), "-vv");
    for stage in stages.into_iter().chain([instruction, done]) {
        assert!(e.contains(stage), "{stage} missing from -vv output");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_timeline_has_a_lane_per_queue_and_a_legend() {
    let dir = scratch("timeline");
    let svg = dir.join("run.svg");
    let o = hostsim(&[
        "run",
        &example("embedding"),
        "--queues",
        "3",
        "--timeline",
        s(&svg),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let picture = std::fs::read_to_string(&svg).unwrap();
    let lanes: Vec<&str> = ["q0", "q1", "q2", "q3"]
        .into_iter()
        .filter(|q| picture.contains(&format!(">{q}</text>")))
        .collect();
    assert_eq!(lanes, ["q0", "q1", "q2"]);
    assert!(picture.contains(">copy</text>") && picture.contains(">add</text>"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
/// `gen` tags its file with the scenario's initial tensors; `replay` over other tensors
/// is refused, and a file without a tag (another producer's) replays as given.
fn a_queue_file_replays_only_over_the_tensors_it_was_made_for() {
    let dir = scratch("replay-origin");
    let queues = dir.join("e.dmaq");
    let o = hostsim(&["gen", &example("embedding"), "-o", s(&queues)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // another cayman scenario's tensors: refused by the file's origin
    let out = dir.join("out");
    let other = example("bound_register");
    let o = hostsim(&["replay", s(&queues), "--scenario", &other, "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("e.dmaq: made by gen for other initial tensors"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    // the same file without its origin (version 2, as another producer writes it)
    // replays over any tensors of its generation
    let mut file = dma::VerifiedQueueFile::open_path(&queues).unwrap();
    let header = file.header().clone();
    let mut w = dma::QueueFileWriter::new(
        std::io::Cursor::new(Vec::new()),
        header.generation(),
        header.queues(),
    )
    .unwrap();
    let mut batch = Vec::new();
    for q in 0..header.queues() {
        while file.read_queue(q, 4096, &mut batch).unwrap() > 0 {
            batch.iter().for_each(|d| w.push(q, d).unwrap());
        }
    }
    let untagged = dir.join("untagged.dmaq");
    std::fs::write(&untagged, w.finish().unwrap().into_inner()).unwrap();
    let o = hostsim(&["replay", s(&untagged), "--scenario", &example("embedding")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_replay_or_timeline_writes_nothing_to_out() {
    let dir = scratch("replay-fail");
    let queues = dir.join("e.dmaq");
    let o = hostsim(&["gen", &example("embedding"), "-o", s(&queues)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = dir.join("out");
    let o = hostsim(&[
        "replay",
        s(&queues),
        "--scenario",
        &example("copy_update"),
        "--out",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cayman"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("e.dmaq: "),
        "names the file: {}",
        stderr(&o)
    );
    let bytes = std::fs::read(&queues).unwrap();
    let cut = dir.join("cut.dmaq");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = hostsim(&[
        "replay",
        s(&cut),
        "--scenario",
        &example("embedding"),
        "--out",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cut.dmaq: "),
        "names the file: {}",
        stderr(&o)
    );
    let nowhere = dir.join("no-such-folder").join("t.svg");
    let o = hostsim(&[
        "run",
        &example("embedding"),
        "--out",
        s(&out),
        "--timeline",
        s(&nowhere),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!out.exists(), "nothing written to --out");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn outputs_are_written_all_or_none() {
    let dir = scratch("all-or-none");
    let (out, svg) = (dir.join("out"), dir.join("t.svg"));
    // a folder where report.json goes: the run's tensors are not put in place either
    std::fs::create_dir_all(out.join("report.json")).unwrap();
    std::fs::write(out.join("table.npy"), b"kept").unwrap();
    let args = [
        "run",
        &example("copy_update"),
        "--out",
        s(&out),
        "--timeline",
        s(&svg),
    ];
    let o = hostsim(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("report.json"), "{}", stderr(&o));
    assert_eq!(files(&out), ["report.json", "table.npy"]);
    assert_eq!(std::fs::read(out.join("table.npy")).unwrap(), b"kept");
    assert!(!svg.exists(), "no timeline without the folder");
    // --out a file: the timeline is not written either
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = hostsim(&[
        "run",
        &example("copy_update"),
        "--out",
        s(&file),
        "--timeline",
        s(&svg),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!svg.exists(), "no timeline without the folder");
    // a name too long for a file name is refused before the run
    let scenario = dir.join("long.toml");
    let long = "b".repeat(201);
    let text = format!(
        "[[tensor]]\nname = \"a\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [1, 4]\n\
         [[tensor]]\nname = \"{long}\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [1, 4]\n\
         [[op]]\nop = \"dma_copy\"\nsrc = \"a\"\ndst = \"{long}\"\n"
    );
    std::fs::write(&scenario, text).unwrap();
    let fresh = dir.join("fresh");
    let o = hostsim(&["run", s(&scenario), "--out", s(&fresh)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 to 200 of"), "{}", stderr(&o));
    assert!(!fresh.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sanitize_passes_clean_indices_and_stops_an_overrun_writing_nothing() {
    let dir = scratch("sanitize");
    let clean = example("bound_register");
    let o = hostsim(&["run", &clean, "--sanitize"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let overrun = clean.replace("scenario.toml", "overrun.toml");
    let out = dir.join("out");
    // without the sanitizer the overrun runs (it reads the neighbouring tensor)
    let o = hostsim(&["run", &overrun]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = hostsim(&["run", &overrun, "--sanitize", "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("index position 3 (value 1500): tensor 1 (next), which the op does not name"),
        "{e}"
    );
    assert!(!out.exists(), "--out was written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_and_trace_refuse_a_bad_op_or_path_writing_nothing() {
    let o = hostsim(&["explain", &example("embedding"), "--op", "9"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--op 9"), "{}", stderr(&o));
    let dir = scratch("trace");
    let bad = dir.join("missing").join("t.json");
    let out = dir.join("out");
    let o = hostsim(&[
        "run",
        &example("embedding"),
        "--trace",
        s(&bad),
        "--out",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--trace"), "{}", stderr(&o));
    assert!(!out.exists() && !bad.exists());
    let good = dir.join("t.json");
    let o = hostsim(&["explain", &example("embedding"), "--trace", s(&good)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&good).unwrap();
    assert!(text.contains("\"traceEvents\":[{"), "{}", &text[..60]);
    std::fs::remove_dir_all(&dir).unwrap();
}
