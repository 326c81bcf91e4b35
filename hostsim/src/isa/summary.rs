//! A human-readable summary of the ISA on one generation (printed by the CLI): every
//! opcode with its operand struct, size and route, and the generation's contract drift.

use std::fmt::Write;

use dma::{Confidence, Generation};

use super::kernels::route_with_confidence;
use super::opcode::OPCODE_TABLE;
use super::operand_layout;

/// The opcode table, struct sizes and routes of `generation`, one opcode per line.
pub fn summary(generation: Generation) -> String {
    let mut out = format!("ISA on {generation}\n");
    out.push_str("opcode  name                     operand struct           bytes  route\n");
    for row in OPCODE_TABLE {
        let (name, size) = operand_layout(row.opcode)
            .map(|(n, s)| (n, s.to_string()))
            .unwrap_or(("(none: raw SEQ form)", "-".to_string()));
        let (route, confidence) = route_with_confidence(generation, row.opcode);
        let tag = match confidence {
            Confidence::Observed => "observed",
            Confidence::Inferred => "inferred",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{:#04x}    {:<24} {:<24} {:>5}  {} ({tag})",
            row.code,
            row.name,
            name,
            size,
            route.name()
        );
    }
    out.push_str(drift(generation));
    out
}

/// The validity contract's per-generation difference.
fn drift(generation: Generation) -> &'static str {
    match generation {
        Generation::Maverick => "contract: GATHER src/dst SBUF only (no PSUM); inst_flags TILE keeps each active channel range inside one 32-partition tile (inferred rule)\n",
        _ => "contract: GATHER src/dst in SBUF or PSUM; inst_flags TILE not defined\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sunda_summary_lists_every_opcode_with_its_route() {
        let s = summary(Generation::Sunda);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[0], "ISA on sunda (v2)");
        assert_eq!(
            lines[3],
            "0x68    GATHER                   S4D4_GT                     64  pool (observed)"
        );
        assert_eq!(
            lines[4],
            "0x79    EMBEDDING_UPDATE         (none: raw SEQ form)         -  pool (observed)"
        );
        assert!(lines[9].contains("SBUF or PSUM"));
    }

    #[test]
    fn maverick_summary_routes_to_the_dge_and_drops_psum() {
        let s = summary(Generation::Maverick);
        assert!(
            s.contains(
                "0xe7    INDIRECT_COPY            S4D4_IC                     64  dge (inferred)"
            ),
            "{s}"
        );
        assert!(s.contains("no PSUM"));
    }
}
