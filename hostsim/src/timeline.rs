//! The DMA queues over the timing model's time as a standalone SVG (`--timeline FILE.svg`
//! of `inspect`, `run` and `replay`): one lane per queue, one box per descriptor coloured
//! by its op, a time axis in ns/us/ms, a legend, queue labels and a title.
//!
//! [`render_svg`] is a pure function of a [`dma::TimelineReport`] with spans (see
//! [`dma::QueueTimeline::new`] and [`dma::VerifiedQueueFile::timeline`] with `spans =
//! true`) and each queue's descriptor ops: the same input gives the same bytes.
//!
//! Size: with more than [`MAX_BOXES`] descriptors, boxes become batches of consecutive
//! descriptors of one queue: a descriptor joins the batch before it when the gap between
//! them is under one pixel and either every descriptor of the batch has its op or the
//! batch is still narrower than one pixel. A batch takes the colour of its most frequent op and its
//! tooltip gives the op counts. Each box is then at least a pixel wide or ends at a
//! visible gap, so a lane holds at most about two boxes per pixel of width, and the file
//! stays a few MB for any queue file. The legend says which mode a picture uses.

use std::fmt::Write as _;
use std::io::{Read, Seek};
use std::path::Path;

use dma::timing::Span;
use dma::{DescOp, Generation, TimelineReport, TimingModel, VerifiedQueueFile};

use crate::error::Error;
use crate::inspect::QueueOps;

/// Descriptors drawn one box each at most; above, boxes are merged batches.
pub const MAX_BOXES: u64 = 20_000;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 64.0;
const LANE: f64 = 22.0;
const PITCH: f64 = 28.0;
const PLOT: f64 = WIDTH - LEFT - RIGHT;

/// What [`render_svg`] draws.
#[derive(Clone, Copy, Debug)]
pub struct TimelineInput<'a> {
    /// The picture's title (escaped for XML).
    pub title: &'a str,
    /// The generation whose timing model made the report.
    pub generation: Generation,
    /// The timing, with every descriptor's span.
    pub report: &'a TimelineReport,
    /// Per queue, each descriptor's op in queue order; a missing entry is drawn as
    /// "unknown".
    pub ops: &'a [Vec<DescOp>],
}

/// The colour of each op (Okabe-Ito, readable with colour-blindness), then "unknown".
const COLOURS: [(&str, &str); 7] = [
    ("copy", "#0072b2"),
    ("add", "#e69f00"),
    ("multiply", "#cc79a7"),
    ("max", "#009e73"),
    ("min", "#d55e00"),
    ("fill", "#999999"),
    ("unknown", "#444444"),
];

/// Index into [`COLOURS`] of an op (`None`: unknown).
fn colour_index(op: Option<DescOp>) -> usize {
    op.map_or(COLOURS.len() - 1, |o| {
        usize::from(o.code()).min(COLOURS.len() - 1)
    })
}

/// One box: a run of consecutive descriptors of one queue.
#[derive(Clone, Debug, PartialEq)]
struct Batch {
    first: u64,
    count: u64,
    start_ps: u64,
    end_ps: u64,
    /// Descriptors per [`COLOURS`] entry.
    ops: [u64; 7],
}

impl Batch {
    fn new(index: u64, span: Span, colour: usize) -> Batch {
        let mut ops = [0; 7];
        ops[colour] = 1;
        Batch {
            first: index,
            count: 1,
            start_ps: span.start_ps,
            end_ps: span.end_ps,
            ops,
        }
    }

    /// The most frequent op (the first of equals).
    fn colour(&self) -> usize {
        let max = self.ops.iter().copied().max().unwrap_or(0);
        self.ops.iter().position(|&n| n == max).unwrap_or(0)
    }
}

/// Maps picoseconds to x pixels.
#[derive(Clone, Copy, Debug)]
struct Scale {
    span_ps: u64,
}

impl Scale {
    fn x(&self, ps: u64) -> f64 {
        LEFT + ps as f64 / self.span_ps as f64 * PLOT
    }

    /// The picoseconds one pixel stands for (at least 1).
    fn pixel_ps(&self) -> u64 {
        ((self.span_ps as f64 / PLOT) as u64).max(1)
    }
}

/// The boxes of one lane: every descriptor, or merged batches (see the module docs).
fn lane_batches(spans: &[Span], ops: &[DescOp], merge: bool, pixel_ps: u64) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    for (i, span) in spans.iter().enumerate() {
        let colour = colour_index(ops.get(i).copied());
        if let Some(last) = out.last_mut().filter(|_| merge) {
            let close = span.start_ps.saturating_sub(last.end_ps) < pixel_ps;
            let narrow = last.end_ps.saturating_sub(last.start_ps) < pixel_ps;
            // `pure`: every descriptor of the batch has this descriptor's op.
            let pure = last.ops[colour] == last.count;
            if close && (narrow || pure) {
                last.count += 1;
                last.end_ps = last.end_ps.max(span.end_ps);
                last.ops[colour] += 1;
                continue;
            }
        }
        out.push(Batch::new(i as u64, *span, colour));
    }
    out
}

/// XML text escaping.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The unit a span of `ps` is best read in: (name, picoseconds per unit).
fn unit(ps: u64) -> (&'static str, u64) {
    match ps {
        0..10_000_000 => ("ns", 1_000),
        10_000_000..10_000_000_000 => ("us", 1_000_000),
        _ => ("ms", 1_000_000_000),
    }
}

/// `ps` in `unit` with the decimals a tick step of `step_ps` needs.
fn time_text(ps: u64, step_ps: u64, (name, per): (&str, u64)) -> String {
    let mut decimals = 0usize;
    let mut scaled = step_ps;
    while scaled < per && decimals < 6 {
        scaled *= 10;
        decimals += 1;
    }
    format!("{:.*} {name}", decimals, ps as f64 / per as f64)
}

/// A 1/2/5 x 10^k step giving about 8 ticks over `span_ps`.
fn tick_step(span_ps: u64) -> u64 {
    let target = (span_ps / 8).max(1);
    let mut magnitude = 1u64;
    loop {
        for m in [1, 2, 5] {
            let step = magnitude.saturating_mul(m);
            if step >= target {
                return step;
            }
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

/// A duration for the legend: `12.35 us`.
fn duration_text(ps: u64) -> String {
    let (name, per) = unit(ps);
    format!("{:.2} {name}", ps as f64 / per as f64)
}

/// The SVG of `input` (see the module docs).
pub fn render_svg(input: &TimelineInput) -> String {
    let report = input.report;
    let total: u64 = report.queues.iter().map(|q| q.spans.len() as u64).sum();
    let merge = total > MAX_BOXES;
    let scale = Scale {
        // An empty report still gets a 1 ns axis.
        span_ps: report.makespan_ps.max(1000),
    };
    let lanes = report.queues.len();
    let axis_y = TOP + lanes as f64 * PITCH + 4.0;
    let height = axis_y + 40.0 + 20.0 * 4.0;
    let mut svg = String::with_capacity(4096 + total.min(MAX_BOXES * 2) as usize * 120);
    // Writing to a String cannot fail: the results of write! below are ignored.
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
    );
    header(&mut svg, input, total);
    for (q, timing) in report.queues.iter().enumerate() {
        lane_background(&mut svg, q, timing);
    }
    grid(&mut svg, scale, axis_y);
    let mut boxes = 0u64;
    let mut used = [false; 7];
    for (q, timing) in report.queues.iter().enumerate() {
        let ops = input.ops.get(q).map_or(&[][..], Vec::as_slice);
        let batches = lane_batches(&timing.spans, ops, merge, scale.pixel_ps());
        let y = TOP + q as f64 * PITCH;
        for b in &batches {
            draw_box(&mut svg, q, b, scale, y, merge);
            used[b.colour()] = true;
        }
        boxes += batches.len() as u64;
    }
    axis(&mut svg, scale, axis_y);
    legend(&mut svg, input, axis_y + 40.0, used, (total, boxes, merge));
    svg.push_str("</svg>\n");
    svg
}

fn header(svg: &mut String, input: &TimelineInput, total: u64) {
    let lanes = input.report.queues.len();
    let _ = write!(
        svg,
        "<text x=\"{LEFT}\" y=\"26\" font-size=\"18\" font-weight=\"bold\">{}</text>\n\
         <text x=\"{LEFT}\" y=\"46\" font-size=\"12\" fill=\"#333\">{} \u{b7} {lanes} queue{} \u{b7} \
         {total} descriptors \u{b7} makespan {}</text>\n",
        escape(input.title),
        escape(&input.generation.to_string()),
        if lanes == 1 { "" } else { "s" },
        duration_text(input.report.makespan_ps)
    );
}

/// A lane's label and background, with the queue's totals as a tooltip.
fn lane_background(svg: &mut String, q: usize, timing: &dma::timing::QueueTiming) {
    let y = TOP + q as f64 * PITCH;
    let _ = writeln!(
        svg,
        "<g><title>queue {q}: {} descriptors, {} bytes, busy {}</title>\
         <text x=\"{}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">q{q}</text>\
         <rect x=\"{LEFT}\" y=\"{y}\" width=\"{PLOT}\" height=\"{LANE}\" fill=\"#f2f2f2\"/></g>",
        timing.descriptors,
        timing.bytes,
        duration_text(timing.busy_ps),
        LEFT - 8.0,
        y + LANE / 2.0 + 4.0
    );
}

fn draw_box(svg: &mut String, q: usize, b: &Batch, scale: Scale, y: f64, merge: bool) {
    let x0 = scale.x(b.start_ps);
    let w = (scale.x(b.end_ps) - x0).max(0.5);
    let (name, colour) = COLOURS[b.colour()];
    let stroke = if !merge && w >= 3.0 {
        " stroke=\"#ffffff\" stroke-width=\"0.5\""
    } else {
        ""
    };
    let what = if b.count == 1 {
        format!("q{q} #{} {name}", b.first)
    } else {
        let counts: Vec<String> = COLOURS
            .iter()
            .zip(b.ops)
            .filter(|(_, n)| *n > 0)
            .map(|((op, _), n)| format!("{op} {n}"))
            .collect();
        let last = b.first + b.count - 1;
        format!(
            "q{q} #{}-#{last}: {} descriptors ({})",
            b.first,
            b.count,
            counts.join(", ")
        )
    };
    let _ = writeln!(
        svg,
        "<rect x=\"{x0:.2}\" y=\"{y}\" width=\"{w:.2}\" height=\"{LANE}\" fill=\"{colour}\"{stroke}>\
         <title>{what}, {} to {}</title></rect>",
        duration_text(b.start_ps),
        duration_text(b.end_ps)
    );
}

/// The tick times: 0, step, 2 step, ... up to the span.
fn ticks(scale: Scale) -> impl Iterator<Item = u64> {
    let step = tick_step(scale.span_ps);
    (0..).map_while(move |i: u64| i.checked_mul(step).filter(|&t| t <= scale.span_ps))
}

/// Faint vertical lines at the ticks, behind the lanes' boxes.
fn grid(svg: &mut String, scale: Scale, y: f64) {
    for t in ticks(scale) {
        let x = scale.x(t);
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.2}\" y1=\"{TOP}\" x2=\"{x:.2}\" y2=\"{y}\" stroke=\"#000\" stroke-opacity=\"0.12\"/>"
        );
    }
}

fn axis(svg: &mut String, scale: Scale, y: f64) {
    let step = tick_step(scale.span_ps);
    let u = unit(scale.span_ps);
    let _ = writeln!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#000\"/>",
        LEFT + PLOT
    );
    for t in ticks(scale) {
        let x = scale.x(t);
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.2}\" y1=\"{y}\" x2=\"{x:.2}\" y2=\"{}\" stroke=\"#000\"/>\
             <text x=\"{x:.2}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            y + 5.0,
            y + 18.0,
            time_text(t, step, u)
        );
    }
}

fn legend(
    svg: &mut String,
    input: &TimelineInput,
    y: f64,
    used: [bool; 7],
    counts: (u64, u64, bool),
) {
    let (total, boxes, merge) = counts;
    let mut x = LEFT;
    for (i, (name, colour)) in COLOURS.iter().enumerate() {
        if !used[i] {
            continue;
        }
        let _ = writeln!(
            svg,
            "<rect x=\"{x}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{colour}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"12\">{name}</text>",
            y - 11.0,
            x + 19.0,
            y
        );
        x += 30.0 + 8.0 * name.len() as f64;
    }
    let what = if total == 0 {
        "No descriptors: nothing ran on the DMA queues (the POOL kernels and the reference route use none; the DGE route, `--mechanism dge`, does).".into()
    } else if merge {
        format!(
            "A box is a batch of consecutive descriptors of one queue ({total} descriptors in {boxes} boxes: \
             more than {MAX_BOXES}, so neighbours under a pixel apart are merged; colour = most frequent op)."
        )
    } else {
        "A box is one descriptor; its colour is the descriptor's op. Hover a box for its queue, position and times.".into()
    };
    let notes = [
        what,
        "Gaps in a lane are idle time: a descriptor waiting on a semaphore another queue signals.".into(),
        format!(
            "Times are the DMA timing model's for {} (integer picoseconds from the start of the replay), not measurements; makespan {}.",
            input.generation,
            duration_text(input.report.makespan_ps)
        ),
    ];
    for (i, note) in notes.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"{LEFT}\" y=\"{}\" font-size=\"12\" fill=\"#333\">{}</text>",
            y + 20.0 * (i + 1) as f64,
            escape(note)
        );
    }
}

/// Each queue's descriptor ops, streamed from a verified file (rewound before and after).
pub fn queue_ops<R: Read + Seek>(file: &mut VerifiedQueueFile<R>) -> Result<QueueOps, Error> {
    let mut batch = Vec::with_capacity(dma::queue_file::MAX_BATCH);
    let mut ops = Vec::with_capacity(file.header().queues());
    file.rewind();
    for q in 0..file.header().queues() {
        let mut queue = Vec::new();
        while file.read_queue(q, dma::queue_file::MAX_BATCH, &mut batch)? > 0 {
            queue.extend(batch.iter().map(dma::Descriptor::op));
        }
        ops.push(queue);
    }
    file.rewind();
    Ok(ops)
}

/// The SVG of a verified queue file on its generation's timing model; `ops` from
/// [`queue_ops`] or a listing pass.
pub fn queue_file_svg<R: Read + Seek>(
    file: &mut VerifiedQueueFile<R>,
    ops: &[Vec<DescOp>],
    title: &str,
) -> Result<String, Error> {
    let generation = file.header().generation();
    let report = file.timeline(TimingModel::new(generation), true)?;
    Ok(render_svg(&TimelineInput {
        title,
        generation,
        report: &report,
        ops,
    }))
}

/// Whether the output of command-line flag `flag` (`--timeline`, `--trace`) can go to
/// `path`, checked before the work that makes it: not a folder, and in a folder that
/// exists.
pub fn check_output_path(flag: &str, path: &Path) -> Result<(), Error> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let problem = if path.is_dir() {
        Some("it is a folder")
    } else if parent.is_some_and(|p| !p.is_dir()) {
        Some("its folder does not exist")
    } else {
        None
    };
    problem.map_or(Ok(()), |message| {
        Err(Error::Output {
            what: format!("{flag} {}", path.display()),
            message: message.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::timing::QueueTiming;

    fn queue(spans: &[(u64, u64)]) -> QueueTiming {
        QueueTiming {
            descriptors: spans.len() as u64,
            bytes: 64 * spans.len() as u64,
            busy_ps: spans.iter().map(|s| s.1 - s.0).sum(),
            end_ps: spans.last().map_or(0, |s| s.1),
            spans: spans
                .iter()
                .map(|&(start_ps, end_ps)| Span { start_ps, end_ps })
                .collect(),
        }
    }

    fn render(title: &str, report: &TimelineReport, ops: &[Vec<DescOp>]) -> String {
        render_svg(&TimelineInput {
            title,
            generation: Generation::Cayman,
            report,
            ops,
        })
    }

    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    #[test]
    fn one_lane_per_queue_one_box_per_descriptor() {
        let report = TimelineReport {
            queues: vec![
                queue(&[(0, 100_000), (100_000, 250_000)]),
                queue(&[(1_400_000, 1_500_000)]),
                queue(&[]),
            ],
            makespan_ps: 1_500_000,
        };
        let ops = vec![vec![DescOp::Copy, DescOp::Add], vec![DescOp::Fill]];
        let svg = render("t", &report, &ops);
        assert_eq!(count(&svg, "fill=\"#f2f2f2\""), 3, "lanes");
        assert_eq!(count(&svg, "</title></rect>"), 3, "boxes");
        assert_eq!(
            count(&svg, ">q0</text>") + count(&svg, ">q1</text>") + count(&svg, ">q2</text>"),
            3
        );
        assert_eq!(
            count(&svg, "fill=\"#0072b2\""),
            1 + 1,
            "one copy box and its legend swatch"
        );
        assert_eq!(count(&svg, "fill=\"#e69f00\""), 2);
        assert_eq!(count(&svg, "fill=\"#999999\""), 2);
        assert_eq!(
            count(&svg, "fill=\"#cc79a7\""),
            0,
            "unused ops are not in the legend"
        );
        assert!(
            svg.contains("<title>q0 #1 add, 100.00 ns to 250.00 ns</title>"),
            "{svg}"
        );
        assert!(svg.contains(
            "cayman (v3) \u{b7} 3 queues \u{b7} 3 descriptors \u{b7} makespan 1500.00 ns"
        ));
        assert!(svg.contains("A box is one descriptor"));
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn an_empty_timeline_says_why_it_is_empty() {
        let report = TimelineReport {
            queues: vec![queue(&[]), queue(&[])],
            makespan_ps: 0,
        };
        let svg = render("pool", &report, &[]);
        assert_eq!(count(&svg, "</title></rect>"), 0, "no boxes");
        assert!(
            svg.contains("No descriptors: nothing ran on the DMA queues"),
            "{svg}"
        );
        assert!(!svg.contains("A box is"));
    }

    #[test]
    fn axis_ticks_are_round_numbers() {
        let report = TimelineReport {
            queues: vec![queue(&[(0, 1_500_000)])],
            makespan_ps: 1_500_000,
        };
        let svg = render("t", &report, &[]);
        // a 200 ns step over 1.5 us: 0, 200, ..., 1400
        for t in (0..=1400).step_by(200) {
            assert!(svg.contains(&format!(">{t} ns</text>")), "{t}");
        }
        assert!(!svg.contains(">1600 ns</text>"));
        assert_eq!(count(&svg, "text-anchor=\"middle\""), 8);
        assert_eq!(tick_step(80_000_000), 10_000_000);
        assert_eq!(time_text(2_500_000, 500_000, ("us", 1_000_000)), "2.5 us");
        assert_eq!(unit(12_000_000), ("us", 1_000_000));
    }

    #[test]
    fn titles_and_labels_are_escaped() {
        let report = TimelineReport {
            queues: vec![queue(&[(0, 10)])],
            makespan_ps: 10,
        };
        let svg = render("a<b & \"c\"", &report, &[]);
        assert!(svg.contains(">a&lt;b &amp; &quot;c&quot;</text>"));
        assert!(!svg.contains("a<b"));
        assert_eq!(escape("'<>&\""), "&#39;&lt;&gt;&amp;&quot;");
        // no descriptor op known: the unknown colour, named in the legend
        assert!(svg.contains(">unknown</text>"));
    }

    #[test]
    fn many_descriptors_merge_into_batches() {
        let n = 30_000u64;
        let spans: Vec<(u64, u64)> = (0..n).map(|i| (i * 1000, i * 1000 + 1000)).collect();
        let ops: Vec<DescOp> = (0..n)
            .map(|i| if i < n / 2 { DescOp::Copy } else { DescOp::Add })
            .collect();
        let report = TimelineReport {
            queues: vec![queue(&spans)],
            makespan_ps: n * 1000,
        };
        let svg = render("big", &report, &[ops]);
        // back-to-back spans merge per op: one copy batch and one add batch
        assert_eq!(
            count(&svg, "<title>q0 #"),
            2,
            "{}",
            &svg[..svg.len().min(3000)]
        );
        assert!(svg.contains("<title>q0 #0-#14999: 15000 descriptors (copy 15000)"));
        assert!(svg.contains("<title>q0 #15000-#29999: 15000 descriptors (add 15000)"));
        assert!(svg.contains("30000 descriptors in 2 boxes"));
    }

    #[test]
    fn merging_keeps_pixel_wide_batches_of_mixed_ops() {
        // alternating ops, each descriptor a tenth of a pixel: batches close at one pixel
        let pixel = 1_000_000u64;
        let span = Scale {
            span_ps: (PLOT as u64) * pixel,
        };
        let spans: Vec<Span> = (0..100)
            .map(|i| Span {
                start_ps: i * pixel / 10,
                end_ps: (i + 1) * pixel / 10,
            })
            .collect();
        let ops: Vec<DescOp> = (0..100)
            .map(|i| {
                if i % 2 == 0 {
                    DescOp::Copy
                } else {
                    DescOp::Max
                }
            })
            .collect();
        let batches = lane_batches(&spans, &ops, true, span.pixel_ps());
        assert_eq!(batches.len(), 10);
        assert!(batches
            .iter()
            .all(|b| b.count == 10 && b.ops[0] == 5 && b.ops[3] == 5));
        // a visible gap always ends a batch
        let gap = [
            Span {
                start_ps: 0,
                end_ps: 10,
            },
            Span {
                start_ps: 5 * pixel,
                end_ps: 5 * pixel + 10,
            },
        ];
        assert_eq!(lane_batches(&gap, &[], true, pixel).len(), 2);
        assert_eq!(lane_batches(&spans, &ops, false, pixel).len(), 100);
    }

    #[test]
    fn rendering_is_deterministic() {
        let report = TimelineReport {
            queues: vec![queue(&[(0, 5), (7, 9)]), queue(&[(3, 8)])],
            makespan_ps: 9,
        };
        assert_eq!(render("d", &report, &[]), render("d", &report, &[]));
        let empty = TimelineReport {
            queues: vec![queue(&[])],
            makespan_ps: 0,
        };
        let svg = render("e", &empty, &[]);
        assert_eq!(count(&svg, "</title></rect>"), 0);
        assert!(svg.contains(">0.0 ns</text>") && svg.contains(">1.0 ns</text>"));
    }

    #[test]
    fn output_paths_are_checked_before_work() {
        let dir = std::env::temp_dir().join(format!("hostsim-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        assert!(check_output_path("--timeline", &path).is_ok());
        for (bad, why) in [
            (&dir, "it is a folder"),
            (&dir.join("missing/t.svg"), "does not exist"),
        ] {
            let e = check_output_path("--timeline", bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why) && e.starts_with("--timeline "), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
