//! The four accelerator generations and the per-generation fabric sizes.
//!
//! Sources: SBUF/PSUM/HBM sizes from the public Neuron architecture guides (see
//! `shared/FACTS.md`); maverick (v5) follows mariana (v4) where no public figure exists
//! and is marked [`Confidence::Inferred`].

use crate::error::Error;

/// How well a per-generation fact is grounded in the seeds and public sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Confidence {
    /// Read directly from headers, binaries or a public figure.
    Observed,
    /// Carried over from a neighbouring generation without direct evidence.
    Inferred,
}

/// An accelerator generation (NeuronCore version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Generation {
    /// NC-v2 (Trn1): POOL kernels serve the indirection opcodes.
    Sunda,
    /// NC-v3 (Trn2): the DGE serves the indirection opcodes.
    Cayman,
    /// NC-v4 (Trn3): routed like cayman (inferred).
    Mariana,
    /// NC-v5: routed like cayman (inferred); GATHER may not use PSUM.
    Maverick,
}

/// Bytes in one PSUM partition on every generation (16 KiB, 8 banks of 2 KiB).
pub const PSUM_PARTITION_BYTES: u64 = 16 * 1024;
/// Partitions in SBUF and in PSUM.
pub const PARTITIONS: u32 = 128;

const GIB: u64 = 1 << 30;
const KIB: u64 = 1 << 10;

impl Generation {
    /// Every generation, oldest first.
    pub const ALL: [Generation; 4] = [
        Generation::Sunda,
        Generation::Cayman,
        Generation::Mariana,
        Generation::Maverick,
    ];

    /// The lower-case codename used in scenario files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Generation::Sunda => "sunda",
            Generation::Cayman => "cayman",
            Generation::Mariana => "mariana",
            Generation::Maverick => "maverick",
        }
    }

    /// The NeuronCore version number (2..=5).
    pub fn version(self) -> u8 {
        match self {
            Generation::Sunda => 2,
            Generation::Cayman => 3,
            Generation::Mariana => 4,
            Generation::Maverick => 5,
        }
    }

    /// The Trainium instance name of the generation (`trn1`..`trn3`; maverick has none).
    pub fn instance(self) -> Option<&'static str> {
        match self {
            Generation::Sunda => Some("trn1"),
            Generation::Cayman => Some("trn2"),
            Generation::Mariana => Some("trn3"),
            Generation::Maverick => None,
        }
    }

    /// Parses a codename (`sunda`), version (`v2`) or instance name (`trn1`).
    pub fn from_name(name: &str) -> Result<Generation, Error> {
        let named = |g: Generation| {
            g.name() == name || format!("v{}", g.version()) == name || g.instance() == Some(name)
        };
        Generation::ALL
            .into_iter()
            .find(|&g| named(g))
            .ok_or_else(|| Error::UnknownGeneration {
                name: name.to_string(),
            })
    }

    /// Whether this generation's facts are observed or carried over.
    pub fn confidence(self) -> Confidence {
        match self {
            Generation::Maverick => Confidence::Inferred,
            _ => Confidence::Observed,
        }
    }

    /// Bytes in one SBUF partition: 192 KiB (v2), 224 KiB (v3), 256 KiB (v4, v5 inferred).
    pub fn sbuf_partition_bytes(self) -> u64 {
        match self {
            Generation::Sunda => 192 * KIB,
            Generation::Cayman => 224 * KIB,
            Generation::Mariana | Generation::Maverick => 256 * KIB,
        }
    }

    /// HBM capacity: 32 GiB (v2), 96 GiB (v3), 144 GiB (v4, v5).
    pub fn hbm_bytes(self) -> u64 {
        match self {
            Generation::Sunda => 32 * GIB,
            Generation::Cayman => 96 * GIB,
            Generation::Mariana | Generation::Maverick => 144 * GIB,
        }
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (v{})", self.name(), self.version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_public_figures() {
        let sbuf: Vec<u64> = Generation::ALL
            .iter()
            .map(|g| g.sbuf_partition_bytes())
            .collect();
        assert_eq!(sbuf, vec![196_608, 229_376, 262_144, 262_144]);
        let hbm: Vec<u64> = Generation::ALL
            .iter()
            .map(|g| g.hbm_bytes() >> 30)
            .collect();
        assert_eq!(hbm, vec![32, 96, 144, 144]);
        assert_eq!(Generation::Maverick.confidence(), Confidence::Inferred);
        assert_eq!(Generation::Mariana.confidence(), Confidence::Observed);
    }

    #[test]
    fn names_parse_both_ways() {
        for g in Generation::ALL {
            assert_eq!(Generation::from_name(g.name()).unwrap(), g);
            assert_eq!(
                Generation::from_name(&format!("v{}", g.version())).unwrap(),
                g
            );
        }
        let instances = ["trn1", "trn2", "trn3"].map(|n| Generation::from_name(n).unwrap());
        assert_eq!(
            instances,
            [Generation::Sunda, Generation::Cayman, Generation::Mariana]
        );
        assert!(Generation::from_name("trn4").is_err());
        let err = Generation::from_name("v9").unwrap_err().to_string();
        assert!(err.contains("v9") && err.contains("sunda"), "{err}");
    }
}
