//! Test support shared by the three routes' unit tests (POOL kernels, reference, DGE):
//! fabrics, addresses, typed reads and writes, the fail-closed assertion over any route
//! ([`Route`]), and the datapath cases every route must pass with the same exact
//! results ([`dma_indirect`], [`embedding`], [`indirect_copy`]), so a case is written
//! once and run on every route.

pub mod dma_indirect;
pub mod embedding;
pub mod indirect_copy;

use dma::{Addr4, Element, Fabric, FabricAddr, Generation, Space};

use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::Instruction;

/// A route's execute function: validate, run, report.
pub type Exec = fn(&mut Fabric, &mut CoreState, &Instruction) -> Result<Outcome, Error>;

/// A route under test: the generation its fabrics are for and how it runs an instruction.
#[derive(Clone, Copy)]
pub struct Route {
    pub generation: Generation,
    pub exec: Exec,
}

impl Route {
    /// An empty fabric of the route's generation.
    pub fn fabric(&self) -> Fabric {
        Fabric::new(self.generation)
    }

    /// Runs `inst`, which must succeed.
    pub fn run(&self, f: &mut Fabric, s: &mut CoreState, inst: impl Into<Instruction>) -> Outcome {
        let inst = inst.into();
        (self.exec)(f, s, &inst).unwrap_or_else(|e| panic!("{inst:?}: {e}"))
    }

    /// Runs `inst`, asserts it fails leaving the fabric and the state unchanged, and
    /// returns the error.
    pub fn fails_closed(
        &self,
        f: &mut Fabric,
        s: &mut CoreState,
        inst: impl Into<Instruction>,
    ) -> Error {
        let (digest, before) = (f.digest(), s.clone());
        let e = (self.exec)(f, s, &inst.into()).expect_err("the instruction must fail");
        assert_eq!(
            f.digest(),
            digest,
            "fabric changed by a failing instruction: {e}"
        );
        assert_eq!(*s, before, "state changed by a failing instruction: {e}");
        e
    }
}

/// The ADDR4 of SBUF partition `p`, byte `offset`.
pub fn sbuf(p: u32, offset: u32) -> Addr4 {
    Addr4::encode(Space::Sbuf, p, offset).unwrap()
}

/// The fabric address of SBUF partition `p`, byte `offset`.
pub fn sbuf_at(p: u32, offset: u32) -> FabricAddr {
    FabricAddr(dma::addr::SBUF_BASE + u64::from(p) * dma::addr::SBUF_STRIDE + u64::from(offset))
}

/// Writes `elems` at `addr`.
pub fn put<E: Element>(f: &mut Fabric, addr: FabricAddr, elems: &[E]) {
    f.write_elems(addr, elems).unwrap();
}

/// Reads `n` elements at `addr`.
pub fn get<E: Element + Default>(f: &Fabric, addr: FabricAddr, n: usize) -> Vec<E> {
    let mut out = vec![E::default(); n];
    f.read_elems(addr, &mut out).unwrap();
    out
}

/// Writes `len` pseudo-random bytes (from `seed`) at `addr`.
pub fn fill_random(f: &mut Fabric, addr: FabricAddr, len: u64, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    f.write(addr, &bytes).unwrap();
}

/// `#[test]` functions running each named shared case on `$route` (an expression
/// giving a [`Route`]): `route_cases!(route(), dma_indirect: [gather_picks_source_rows, ...])`.
macro_rules! route_cases {
    ($route:expr, $module:ident: [$($case:ident),* $(,)?]) => {
        $(
            #[test]
            fn $case() {
                $crate::test_support::$module::$case($route);
            }
        )*
    };
}
pub(crate) use route_cases;
