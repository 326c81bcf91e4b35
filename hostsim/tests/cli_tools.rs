//! The tool commands through the binary: `inspect` (table, JSON lines, SVG timeline, bad
//! files), `isa decode` / `isa encode` (round trips, bad input), `isa` summary and `-v`.

use std::io::{Cursor, Write};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dma::{
    Addr4, AddressMap, ComputeOp, DescFlags, DescOp, Descriptor, Dtype, FabricAddr, Generation,
    Location, QueueFileWriter, SemId, SemWait, Space,
};
use hostsim::isa::{
    BoundCheckReg, Direct2dSide, DmaDirect2d, DmaIndirect1d, DmaIndirectFlags, DmaSide,
    EmbeddingTable, Indirect, IndirectMode, Instruction, PoolBufferLoad, PseudoEmbeddingUpdate,
    S4d4Gt, S4d4Ic, Tensor4d,
};

fn hostsim(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hostsim"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// A scratch folder of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hostsim-cli-tools-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three descriptors on two queues, the second queue waiting on the first's SIGNAL.
fn write_queue_file(path: &Path) {
    let map = AddressMap::new(Generation::Cayman);
    let sbuf = map
        .fabric_addr(Location {
            space: Space::Sbuf,
            partition: 2,
            offset: 0x80,
        })
        .unwrap();
    let copy = Descriptor::new(DescOp::Copy, FabricAddr(0x1000), sbuf, 512, Dtype::F32)
        .unwrap()
        .with_flags(DescFlags::END_OF_INSTRUCTION)
        .with_signal(SemId::new(0).unwrap());
    let wait = SemWait {
        sem: SemId::new(0).unwrap(),
        count: NonZeroU32::new(1).unwrap(),
    };
    let add = Descriptor::new(DescOp::Add, sbuf, FabricAddr(0x8000), 512, Dtype::F32)
        .unwrap()
        .with_wait(wait);
    let fill = Descriptor::fill(FabricAddr(0x9000), 128, Dtype::U16, 7).unwrap();
    let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, 2).unwrap();
    w.push(0, &copy).unwrap();
    w.push(1, &add).unwrap();
    w.push(1, &fill).unwrap();
    std::fs::write(path, w.finish().unwrap().into_inner()).unwrap();
}

#[test]
fn inspect_lists_the_descriptors() {
    let dir = scratch("table");
    let file = dir.join("q.dmaq");
    write_queue_file(&file);
    let out = hostsim(&["inspect", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    assert_eq!(
        lines[0],
        "queue file: cayman (v3), 2 queues, 3 descriptors, 1152 bytes"
    );
    assert_eq!(lines[1], "counts: q0=1 q1=2");
    assert_eq!(lines[2], hostsim::inspect::TABLE_HEADER);
    assert_eq!(
        lines[3],
        "    0          0  hbm:0x1000             sbuf:2:0x80              512  copy      f32    eoi,signal(s0)"
    );
    assert_eq!(
        lines[4],
        "    1          0  sbuf:2:0x80            hbm:0x8000               512  add       f32    wait(s0>=1)"
    );
    assert_eq!(
        lines[5],
        "    1          1  fill=0x7               hbm:0x9000               128  fill      u16    -"
    );
    assert!(out.stderr.is_empty(), "no progress bar off a terminal");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_json_lines_parse() {
    let dir = scratch("json");
    let file = dir.join("q.dmaq");
    write_queue_file(&file);
    let out = hostsim(&["inspect", file.to_str().unwrap(), "--json"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4);
    assert_eq!(records[0]["record"], "header");
    assert_eq!(records[0]["counts"], serde_json::json!([1, 2]));
    let positions: Vec<(u64, u64)> = records[1..]
        .iter()
        .map(|r| {
            (
                r["queue"].as_u64().unwrap(),
                r["position"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(positions, [(0, 0), (1, 0), (1, 1)]);
    assert_eq!(records[1]["signal"], 0);
    assert_eq!(
        records[2]["wait"],
        serde_json::json!({"sem": 0, "count": 1})
    );
    assert_eq!(records[3]["op"], "fill");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_draws_the_timeline() {
    let dir = scratch("svg");
    let file = dir.join("q.dmaq");
    write_queue_file(&file);
    let svg = dir.join("t.svg");
    let args = [
        "inspect",
        file.to_str().unwrap(),
        "--timeline",
        svg.to_str().unwrap(),
    ];
    let out = hostsim(&args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(picture.matches("fill=\"#f2f2f2\"").count(), 2, "two lanes");
    assert_eq!(picture.matches("</title></rect>").count(), 3, "three boxes");
    assert!(picture.contains("cayman (v3) \u{b7} 2 queues \u{b7} 3 descriptors"));
    // a timeline path that cannot be written is refused before the listing
    for bad in [dir.clone(), dir.join("missing").join("t.svg")] {
        let args = [
            "inspect",
            file.to_str().unwrap(),
            "--timeline",
            bad.to_str().unwrap(),
        ];
        let out = hostsim(&args, None);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `inspect q --timeline t.svg --trace t.json | head -1`: the listing's reader goes away,
/// the files asked for are still written (the pipe here is closed before the first line).
#[test]
fn inspect_writes_its_files_when_the_listing_pipe_closes() {
    let dir = scratch("closed-pipe");
    let file = dir.join("q.dmaq");
    write_queue_file(&file);
    let (svg, trace) = (dir.join("t.svg"), dir.join("t.json"));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_hostsim"))
        .args(["inspect", file.to_str().unwrap()])
        .args(["--timeline", svg.to_str().unwrap()])
        .args(["--trace", trace.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(picture.matches("</title></rect>").count(), 3, "three boxes");
    let events: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("the trace is JSON");
    assert!(events.is_object() || events.is_array(), "{events}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `hostsim isa | head -1` and the like: a closed stdout ends every command quietly, exit
/// 0, with no panic (`fuzz` runs its cases to the end, its exit code telling its
/// findings); `run` has written its outputs by then.
#[test]
fn every_printing_command_ends_quietly_when_stdout_closes() {
    let dir = scratch("closed-stdout");
    let out_dir = dir.join("out");
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/index_column/scenario.toml"
    );
    let queues = dir.join("q.dmaq");
    let commands: [Vec<&str>; 6] = [
        vec!["isa"],
        vec!["demo", "--generation", "sunda"],
        vec!["run", example, "--out", out_dir.to_str().unwrap()],
        vec!["gen", example, "--out", queues.to_str().unwrap()],
        vec!["explain", example],
        vec![
            "fuzz",
            "--target",
            "dge",
            "--iters",
            "3",
            "--out",
            dir.to_str().unwrap(),
        ],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_hostsim"))
            .args(&args)
            .env_remove("RUST_LOG")
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr), "", "{args:?}");
    }
    assert!(out_dir.join("report.json").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_refuses_what_replay_would_refuse_before_printing() {
    // well-formed files that no replay runs: a wait no queue ever satisfies, and a
    // destination off the fabric
    let dir = scratch("unreplayable");
    let write = |name: &str, queues: &[Vec<Descriptor>]| {
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, queues.len())
            .unwrap();
        for (q, descs) in queues.iter().enumerate() {
            descs.iter().for_each(|d| w.push(q, d).unwrap());
        }
        let path = dir.join(name);
        std::fs::write(&path, w.finish().unwrap().into_inner()).unwrap();
        path
    };
    let copy = |dst: u64| {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(0x1000),
            FabricAddr(dst),
            64,
            Dtype::U8,
        )
        .unwrap()
    };
    // each queue waits for the other's signal (a wait cycle)
    let waits_then_signals = |dst: u64, wait: u8, signal: u8| {
        let wait = SemWait {
            sem: SemId::new(wait).unwrap(),
            count: NonZeroU32::new(1).unwrap(),
        };
        let signal = SemId::new(signal).unwrap();
        vec![
            copy(dst).with_wait(wait),
            copy(dst + 64).with_signal(signal),
        ]
    };
    let cycle = [
        waits_then_signals(0x2000, 1, 0),
        waits_then_signals(0x3000, 0, 1),
    ];
    let stall = write("stall.dmaq", &cycle);
    let off = write("off.dmaq", &[vec![copy(u64::MAX - 8)]]);
    for (path, rule) in [
        (&stall, "every queue stalls"),
        (&off, "destination range rejected"),
    ] {
        let svg = dir.join("t.svg");
        let out = hostsim(
            &[
                "inspect",
                path.to_str().unwrap(),
                "--timeline",
                svg.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
        assert!(!svg.exists());
        assert!(text(&out.stderr).contains(rule), "{}", text(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_rejects_a_bad_file_before_printing() {
    let dir = scratch("bad");
    let file = dir.join("q.dmaq");
    write_queue_file(&file);
    let good = std::fs::read(&file).unwrap();
    let name = file.to_str().unwrap();
    let mut flipped = good.clone();
    flipped[152 + 16] ^= 0x01; // queue 0 descriptor 0, its length
    std::fs::write(&file, &flipped).unwrap();
    let out = hostsim(
        &[
            "inspect",
            name,
            "--timeline",
            dir.join("t.svg").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(!dir.join("t.svg").exists());
    let err = text(&out.stderr);
    assert!(err.starts_with(&format!("hostsim: {name}: ")), "{err}");
    std::fs::write(&file, &good[..good.len() - 5]).unwrap();
    let out = hostsim(&["inspect", name], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        format!("hostsim: {name}: queue file truncated at byte 243: queue 1 descriptor 1 needs bytes up to 248\n")
    );
    let out = hostsim(
        &["inspect", dir.join("missing.dmaq").to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn sbuf(p: u32, off: u32) -> Addr4 {
    Addr4::encode(Space::Sbuf, p, off).unwrap()
}

/// One instruction of each operand struct.
fn one_of_each() -> Vec<Instruction> {
    let t = Tensor4d::contiguous(sbuf(0, 0x400), 16);
    let side = |start, idx, bound| DmaSide {
        start_addr: FabricAddr(start),
        idx_start_addr: idx,
        elem_size: 64,
        step_elem: 1,
        bound,
    };
    let flags = DmaIndirectFlags::rows(IndirectMode::Src, true, false);
    let d2 = |s| Direct2dSide {
        start_addr: FabricAddr(s),
        step_elem: [1, 16],
    };
    let table = EmbeddingTable {
        base_addr: FabricAddr(0x10000),
        num_entries: 100,
        stride_bytes: 128,
        num_elements: 32,
    };
    vec![
        PoolBufferLoad::new(t, Dtype::F32, 8).into(),
        S4d4Gt::new(
            t,
            Tensor4d::contiguous(sbuf(1, 0), 16),
            Dtype::U16,
            Dtype::F32,
            8,
        )
        .into(),
        S4d4Ic::gather(
            Indirect::new(sbuf(0, 0), sbuf(0, 0x800), 64),
            t,
            Dtype::F16,
            4,
            512,
            16,
        )
        .into(),
        DmaIndirect1d::new(
            flags,
            side(
                0x1000,
                sbuf(0, 0x100),
                BoundCheckReg::enabled(4, false).unwrap(),
            ),
            side(0x9000, Addr4(0), BoundCheckReg::DISABLED),
            32,
            Dtype::F32,
            ComputeOp::Add,
        )
        .into(),
        PseudoEmbeddingUpdate::new(
            table,
            sbuf(0, 0),
            sbuf(0, 0x200),
            4,
            Dtype::F32,
            dma::CceOp::Max,
        )
        .into(),
        DmaDirect2d::new(
            d2(0x100),
            d2(0x2000),
            64,
            [16, 4],
            Dtype::I32,
            ComputeOp::None,
        )
        .into(),
    ]
}

fn hex_of(inst: &Instruction) -> String {
    inst.encode().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn decode_then_encode_gives_the_same_hex() {
    for inst in one_of_each() {
        let hex = hex_of(&inst);
        for format in ["toml", "json"] {
            let decoded = hostsim(&["isa", "decode", &hex, "--format", format], None);
            assert_eq!(decoded.status.code(), Some(0), "{}", text(&decoded.stderr));
            let fields = text(&decoded.stdout);
            assert!(fields.contains(inst.opcode().name()), "{fields}");
            let encoded = hostsim(&["isa", "encode"], Some(&fields));
            assert_eq!(
                encoded.status.code(),
                Some(0),
                "{fields}\n{}",
                text(&encoded.stderr)
            );
            let out = text(&encoded.stdout);
            let mut lines = out.lines();
            let again: String = lines.next().unwrap().split(' ').collect();
            assert_eq!(again, hex, "{fields}");
            assert!(lines.next().unwrap().starts_with("# "), "{out}");
        }
        // auto is encode's reading of its input; decode prints toml or json (found by an
        // audit: accepted, then printed as toml)
        let auto = hostsim(&["isa", "decode", &hex, "--format", "auto"], None);
        assert_eq!(auto.status.code(), Some(2));
        assert!(text(&auto.stderr).contains("[possible values: toml, json]"));
    }
}

#[test]
fn decode_prints_fields_and_the_verdict() {
    let psum = Tensor4d::contiguous(Addr4::encode(Space::Psum, 0, 0).unwrap(), 16);
    let g: Instruction = S4d4Gt::new(
        Tensor4d::contiguous(sbuf(0, 0), 16),
        psum,
        Dtype::U16,
        Dtype::F32,
        8,
    )
    .into();
    // spaced, 0x-prefixed, over several arguments
    let spaced: Vec<String> = g.encode().iter().map(|b| format!("0x{b:02x}")).collect();
    let mut args = vec!["isa", "decode", "--generation", "maverick"];
    args.extend(spaced.iter().map(String::as_str));
    let out = hostsim(&args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with(
        "# S4D4_GT (GATHER 0x68), 64 bytes\nopcode = \"GATHER\"\nstruct = \"S4D4_GT\"\n"
    ));
    assert!(stdout.contains("\ndst_mem_pattern.start_addr = \"psum:0:0x0\"\n"));
    assert!(
        stdout.contains("\nverdict = \"invalid on maverick: S4D4_GT.dst_mem_pattern"),
        "{stdout}"
    );
    let ok = hostsim(
        &["isa", "decode", &hex_of(&g), "--generation", "mariana"],
        None,
    );
    assert!(text(&ok.stdout).ends_with("verdict = \"valid on mariana\"\n"));
}

#[test]
fn bad_hex_and_bad_fields_exit_2() {
    let out = hostsim(&["isa", "decode", "68 00 zz"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "hostsim: instruction hex: 'z' is not a hex digit\n"
    );
    assert!(out.stdout.is_empty());
    let out = hostsim(&["isa", "decode", "6800"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "hostsim: instruction is 2 bytes; an ISA instruction is exactly 64 bytes\n"
    );
    let gather = &one_of_each()[1];
    let fields = text(&hostsim(&["isa", "decode", &hex_of(gather)], None).stdout);
    let unknown = format!("{fields}colour = \"red\"\n");
    let out = hostsim(&["isa", "encode"], Some(&unknown));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("hostsim: S4D4_GT has no field colour"),
        "{}",
        text(&out.stderr)
    );
    let missing = fields.replace("immediate = \"0x00000000\"\n", "");
    let out = hostsim(&["isa", "encode"], Some(&missing));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("hostsim: S4D4_GT.immediate is missing"));
    let wide = fields.replace(
        "header.num_active_channels = 8",
        "header.num_active_channels = 300",
    );
    let out = hostsim(&["isa", "encode", "--format", "toml"], Some(&wide));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "hostsim: S4D4_GT.header.num_active_channels = 300: must be an unsigned integer 0..=255\n"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn isa_summary_keeps_the_flag_form() {
    let flag = hostsim(&["isa", "--generation", "sunda"], None);
    let sub = hostsim(&["isa", "summary", "--generation", "sunda"], None);
    assert_eq!(flag.status.code(), Some(0));
    assert_eq!(flag.stdout, sub.stdout);
    assert!(text(&flag.stdout).contains("ISA on sunda (v2)\n"));
}
