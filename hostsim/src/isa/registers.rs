//! The register file DMA_INDIRECT reads its index bounds (BOUND_CHECK_REG) and shapes
//! (the shape register byte) from: 64 registers of 32 bits.
//!
//! Bounds are 64 bits wide: `bc_reg` holds the low 32 bits and `bc_reg + 1` the high 32
//! bits (seed 000 section 3c), so a bound of at most `u32::MAX` leaves `bc_reg + 1` at 0
//! and `bc_reg` 63 cannot be enabled (validation rule `WideBoundRegister`). A shape is
//! four consecutive registers (X, Y, Z, W element counts; the project's encoding).

use super::fields::{BoundCheckReg, ShapeReg};
use super::rule::{ensure, invalid, FieldPath, Rule};
use crate::error::Error;

/// Registers in the file.
pub const NUM_REGISTERS: usize = 64;

/// The 64 x 32-bit register file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundRegisters([u32; NUM_REGISTERS]);

impl Default for BoundRegisters {
    fn default() -> Self {
        BoundRegisters([0; NUM_REGISTERS])
    }
}

const AT: FieldPath = FieldPath::new("BOUND_REGISTERS", "reg");

impl BoundRegisters {
    /// A file of zeros.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file holding `regs`.
    pub fn from_array(regs: [u32; NUM_REGISTERS]) -> Self {
        BoundRegisters(regs)
    }

    /// Register `reg`.
    pub fn get(&self, reg: u8) -> Result<u32, Error> {
        self.0
            .get(usize::from(reg))
            .copied()
            .ok_or_else(|| invalid(AT, reg, Rule::FieldWidth))
    }

    /// Sets register `reg`.
    pub fn set(&mut self, reg: u8, value: u32) -> Result<(), Error> {
        match self.0.get_mut(usize::from(reg)) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(invalid(AT, reg, Rule::FieldWidth)),
        }
    }

    /// Stores a 64-bit bound in `reg` (low) and `reg + 1` (high).
    pub fn set_bound(&mut self, reg: u8, bound: u64) -> Result<(), Error> {
        ensure(reg < 63, AT, reg, Rule::WideBoundRegister)?;
        self.set(reg, bound as u32)?;
        self.set(reg + 1, (bound >> 32) as u32)
    }

    /// The bound `bc` names, or `None` when bound checking is disabled.
    pub fn bound(&self, bc: BoundCheckReg) -> Result<Option<u64>, Error> {
        if !bc.bc_enabled() {
            return Ok(None);
        }
        let reg = bc.bc_reg();
        ensure(reg < 63, AT, reg, Rule::WideBoundRegister)?;
        let lo = self.get(reg)?;
        let hi = self.get(reg + 1)?;
        Ok(Some(u64::from(hi) << 32 | u64::from(lo)))
    }

    /// Stores the shape `xyzw` (X, Y, Z, W) in `reg..=reg + 3`.
    pub fn set_shape(&mut self, reg: u8, xyzw: [u32; 4]) -> Result<(), Error> {
        ensure(reg <= 60, AT, reg, Rule::ShapeRegisterRange)?;
        (reg..).zip(xyzw).try_for_each(|(r, v)| self.set(r, v))
    }

    /// The (X, Y, Z, W) shape `shape` names, or `None` without a shape register.
    pub fn shape(&self, shape: ShapeReg) -> Result<Option<[u32; 4]>, Error> {
        if !shape.present() {
            return Ok(None);
        }
        let reg = shape.reg();
        ensure(reg <= 60, AT, reg, Rule::ShapeRegisterRange)?;
        Ok(Some([
            self.get(reg)?,
            self.get(reg + 1)?,
            self.get(reg + 2)?,
            self.get(reg + 3)?,
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_wide_pairs() {
        let mut r = BoundRegisters::new();
        r.set_bound(10, 0x1_0000_0005).unwrap();
        assert_eq!((r.get(10).unwrap(), r.get(11).unwrap()), (5, 1));
        let bc = BoundCheckReg::enabled(10, false).unwrap();
        assert_eq!(r.bound(bc).unwrap(), Some(0x1_0000_0005));
        assert_eq!(r.bound(BoundCheckReg::DISABLED).unwrap(), None);
        let top = BoundCheckReg::enabled(63, false).unwrap();
        assert_eq!(
            r.bound(top).unwrap_err().rule(),
            Some(Rule::WideBoundRegister)
        );
        assert_eq!(
            r.set_bound(63, 1).unwrap_err().rule(),
            Some(Rule::WideBoundRegister)
        );
    }

    #[test]
    fn register_numbers_are_checked() {
        let mut r = BoundRegisters::from_array([7; NUM_REGISTERS]);
        assert_eq!(r.get(63).unwrap(), 7);
        let e = r.get(64).unwrap_err();
        assert_eq!(
            e.to_string(),
            "BOUND_REGISTERS.reg = 64: the value does not fit its 6-bit register field (0..=63)"
        );
        assert_eq!(r.set(64, 1).unwrap_err().rule(), Some(Rule::FieldWidth));
        r.set(0, 9).unwrap();
        assert_eq!(r.get(0).unwrap(), 9);
    }

    #[test]
    fn shapes_read_four_registers() {
        let mut r = BoundRegisters::new();
        for (i, v) in [4u32, 3, 2, 1].into_iter().enumerate() {
            r.set(60 + i as u8, v).unwrap();
        }
        assert_eq!(
            r.shape(ShapeReg::at(60).unwrap()).unwrap(),
            Some([4, 3, 2, 1])
        );
        assert_eq!(r.shape(ShapeReg::NONE).unwrap(), None);
        let e = r.shape(ShapeReg::at(61).unwrap()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ShapeRegisterRange));
        r.set_shape(8, [16, 4, 2, 1]).unwrap();
        assert_eq!((r.get(8).unwrap(), r.get(11).unwrap()), (16, 1));
        assert_eq!(
            r.shape(ShapeReg::at(8).unwrap()).unwrap(),
            Some([16, 4, 2, 1])
        );
        let e = r.set_shape(61, [1; 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "BOUND_REGISTERS.reg = 61: a shape reads the four registers reg..=reg+3, so reg must be <= 60"
        );
        assert_eq!(r.get(61).unwrap(), 3, "a refused shape sets nothing");
    }
}
