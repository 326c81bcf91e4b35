//! [`SuperGather`]: the gvr file gr0..gr7 and the scatter queue, executing the SuperGather
//! instructions (gathera / gatherd / mgatherd / movgatherd / scatter / scatterinc /
//! scatterw and their `t` forms) against a [`MemPort`].
//!
//! Mnemonics map to a method plus a [`Width`]: `gatheranx16t gr, a, v, vb` is
//! `gathera_t(gr, Width::Nx16, a, &v, vb)`; the non-`t` forms are the same op with every
//! lane enabled. The drains `gatherdnx16` / `gatherdnx8u` / `gatherdn_2x32` are one method,
//! [`SuperGather::gatherd`]: the drained 512-bit image is fixed by the A-phase width (NX8U
//! elements already zero-extended to 16-bit lanes), and the mnemonic only names the lane
//! view the caller reads it with.

use crate::control::Width;
use crate::gather::{GatherReg, Gr};
use crate::port::MemPort;
use crate::reg::{VBool, VecReg};
use crate::scatter::{ScatterOp, ScatterQueue, ScatterReport};

/// The SuperGather engine state: eight staging registers and the posted-scatter queue.
#[derive(Clone, Debug, Default)]
pub struct SuperGather {
    gvr: [GatherReg; Gr::COUNT],
    scatter: ScatterQueue,
}

impl SuperGather {
    /// A fresh engine: empty staging registers, empty scatter queue.
    pub fn new() -> SuperGather {
        SuperGather::default()
    }

    /// The staging register `gr`, for inspecting its image.
    pub fn gr(&self, gr: Gr) -> &GatherReg {
        // A Gr is below Gr::COUNT by construction, so the index is in the array.
        &self.gvr[gr.index()]
    }

    fn gr_mut(&mut self, gr: Gr) -> &mut GatherReg {
        // As in `gr`: the index is below Gr::COUNT.
        &mut self.gvr[gr.index()]
    }

    /// `gathera{nx16,nx8u,n_2x32} gr, base, offsets`: the A-phase with every lane enabled.
    pub fn gathera(&mut self, gr: Gr, width: Width, base: u64, offsets: &VecReg) {
        self.gathera_t(gr, width, base, offsets, VBool::ALL);
    }

    /// `gathera{nx16,nx8u,n_2x32}t gr, base, offsets, vb`: stage the offset image, fill the
    /// data buffer with sentinels, record GSEnable and the marker, and post
    /// `base + offset[k] * elem_sz` for each lane `vb` enables. Disabled lanes are dead.
    pub fn gathera_t(&mut self, gr: Gr, width: Width, base: u64, offsets: &VecReg, vb: VBool) {
        self.gr_mut(gr).stage(width, base, offsets, vb);
    }

    /// `gatherd* v, gr`: collect the posted lanes through `port` and drain; dead lanes
    /// (disabled, address overflow, or refused by the port) are 0.
    pub fn gatherd<P: MemPort>(&mut self, gr: Gr, port: &P) -> VecReg {
        let reg = self.gr_mut(gr);
        reg.collect(port);
        reg.drain()
    }

    /// `mgatherd v, gr`: collect and drain with the GSEnable merge
    /// `(gathered & EN) | (old & !EN)`: disabled lanes keep `old`, enabled dead lanes are 0.
    pub fn mgatherd<P: MemPort>(&mut self, gr: Gr, old: &VecReg, port: &P) -> VecReg {
        let reg = self.gr_mut(gr);
        reg.collect(port);
        reg.merge(old)
    }

    /// `movgatherd gr, v`: move `v` into the staging register as fully collected, enabled
    /// data (nothing posted), so a following gatherd or mgatherd returns `v`.
    pub fn movgatherd(&mut self, gr: Gr, v: &VecReg) {
        self.gr_mut(gr).load_data(v);
    }

    /// The DGE's index read: `gathera_t` then `gatherd` on the same register.
    pub fn gather_t<P: MemPort>(
        &mut self,
        gr: Gr,
        width: Width,
        base: u64,
        offsets: &VecReg,
        vb: VBool,
        port: &P,
    ) -> VecReg {
        self.gathera_t(gr, width, base, offsets, vb);
        self.gatherd(gr, port)
    }

    /// `scatter{nx16,nx8u,n_2x32} data, base, offsets`: every lane enabled.
    pub fn scatter<P: MemPort>(
        &mut self,
        port: &mut P,
        width: Width,
        base: u64,
        offsets: &VecReg,
        data: &VecReg,
    ) {
        self.scatter_t(port, width, base, offsets, data, VBool::ALL);
    }

    /// `scatter*t`: post `mem[base + offset[k] * elem_sz] = data[k]` for each enabled lane,
    /// ascending; visible after [`SuperGather::scatterw`] (NX8U stores each lane's low byte).
    pub fn scatter_t<P: MemPort>(
        &mut self,
        port: &mut P,
        width: Width,
        base: u64,
        offsets: &VecReg,
        data: &VecReg,
        vb: VBool,
    ) {
        let op = ScatterOp {
            width,
            base,
            offsets,
            data: Some(data),
            pred: vb,
        };
        self.scatter.post(port, &op);
    }

    /// `scatterinc{nx16,nx8u,n_2x32} base, offsets`: every lane enabled.
    pub fn scatterinc<P: MemPort>(
        &mut self,
        port: &mut P,
        width: Width,
        base: u64,
        offsets: &VecReg,
    ) {
        self.scatterinc_t(port, width, base, offsets, VBool::ALL);
    }

    /// `scatterinc*t`: post `mem[base + offset[k] * elem_sz] += 1` (wrapping at the element
    /// width) for each enabled lane; colliding lanes accumulate. Visible after scatterw.
    pub fn scatterinc_t<P: MemPort>(
        &mut self,
        port: &mut P,
        width: Width,
        base: u64,
        offsets: &VecReg,
        vb: VBool,
    ) {
        let op = ScatterOp {
            width,
            base,
            offsets,
            data: None,
            pred: vb,
        };
        self.scatter.post(port, &op);
    }

    /// `scatterw`: the barrier. Commits every posted scatter to `port` in order and reports
    /// what was written and what was dead since the previous scatterw.
    pub fn scatterw<P: MemPort>(&mut self, port: &mut P) -> ScatterReport {
        self.scatter.fence(port)
    }

    /// Lane stores posted and not yet visible.
    pub fn pending_scatters(&self) -> usize {
        self.scatter.pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alu::{ltun_2x32, movva32};
    use crate::port::MemTable;
    use crate::reg::LaneView;
    use crate::scatter::ScatterReport;

    fn words(f: impl Fn(usize) -> u32) -> VecReg {
        VecReg::from_n_2x32(std::array::from_fn(f))
    }

    #[test]
    fn dge_style_index_read_masks_out_of_bound_indices() {
        let table: Vec<u8> = (0..64u32).flat_map(|i| (1000 + i).to_le_bytes()).collect();
        let port = MemTable::from_bytes(table);
        let offs = words(|k| 4 * k as u32);
        let in_bounds = ltun_2x32(&offs, &movva32(48));
        let mut sg = SuperGather::new();
        let v = sg.gather_t(Gr::GR4, Width::N2x32, 0, &offs, in_bounds, &port);
        let expect: [u32; 16] =
            std::array::from_fn(|k| if k < 12 { 1000 + 4 * k as u32 } else { 0 });
        assert_eq!(v.n_2x32(), expect);
    }

    #[test]
    fn an_empty_register_drains_zero_and_merges_old() {
        let mut sg = SuperGather::new();
        let port = MemTable::zeroed(4);
        assert_eq!(sg.gatherd(Gr::GR3, &port), VecReg::ZERO);
        assert_eq!(sg.mgatherd(Gr::GR3, &movva32(9), &port), movva32(9));
        assert_eq!(sg.gr(Gr::GR3).marker(), 0);
    }

    #[test]
    fn mgatherd_zeroes_enabled_dead_lanes_and_keeps_disabled_ones() {
        let port = MemTable::from_bytes(vec![0x11; 8]);
        let mut sg = SuperGather::new();
        let offs = words(|k| if k == 1 { 99 } else { 0 });
        sg.gathera_t(
            Gr::GR1,
            Width::N2x32,
            0,
            &offs,
            VBool::from_lanes(LaneView::N2x32, 0b011),
        );
        let r = sg.mgatherd(Gr::GR1, &movva32(7), &port);
        assert_eq!(r.n_2x32()[..3], [0x1111_1111, 0, 7]);
    }

    #[test]
    fn movgatherd_round_trips_through_the_staging_register() {
        let mut sg = SuperGather::new();
        let v = words(|k| k as u32);
        sg.movgatherd(Gr::GR7, &v);
        assert_eq!(sg.gatherd(Gr::GR7, &MemTable::zeroed(0)), v);
    }

    #[test]
    fn scatters_are_visible_after_scatterw_and_last_writer_wins() {
        let mut t = MemTable::zeroed(4);
        let mut sg = SuperGather::new();
        let data = VecReg::from_nx16(std::array::from_fn(|k| k as u16 + 1));
        sg.scatter(&mut t, Width::Nx16, 0, &VecReg::ZERO, &data);
        assert_eq!(sg.pending_scatters(), 32);
        assert_eq!(
            sg.gather_t(Gr::GR0, Width::Nx16, 0, &VecReg::ZERO, VBool::ALL, &t)
                .nx16()[0],
            0
        );
        assert_eq!(
            sg.scatterw(&mut t),
            ScatterReport {
                written: 32,
                dead: 0
            }
        );
        assert_eq!(t.as_bytes(), &[32, 0, 0, 0]);
    }

    #[test]
    fn scatterinc_t_counts_only_enabled_lanes() {
        let mut t = MemTable::zeroed(4);
        let mut sg = SuperGather::new();
        let vb = VBool::from_lanes(LaneView::Nx16, 0x0000_ff0f);
        sg.scatterinc_t(&mut t, Width::Nx16, 2, &VecReg::ZERO, vb);
        sg.scatterinc(&mut t, Width::Nx8u, 0, &VecReg::ZERO);
        sg.scatterw(&mut t);
        assert_eq!(t.as_bytes(), &[32, 0, 12, 0]);
    }
}
