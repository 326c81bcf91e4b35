//! Fuzzes the fabric's one range check and the ADDR4 decoder: never a panic, and every
//! accepted range lies inside the region it names.
#![no_main]

use dma::{Addr4, AddressMap, FabricAddr, Generation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: [u8; 21]| {
    let generation = Generation::ALL[usize::from(data[0] % 4)];
    let map = AddressMap::new(generation);
    let addr = u64::from_le_bytes(data[1..9].try_into().unwrap_or_default());
    let len = u64::from_le_bytes(data[9..17].try_into().unwrap_or_default());
    if let Ok(region) = map.check_range(FabricAddr(addr), len) {
        assert!(addr >= region.base && addr - region.base + len <= region.len);
    }
    let raw = u32::from_le_bytes(data[17..21].try_into().unwrap_or_default());
    if let Ok(fabric) = Addr4(raw).to_fabric(&map) {
        assert_eq!(Addr4::from_fabric(fabric, &map).ok(), Some(Addr4(raw)));
    }
});
