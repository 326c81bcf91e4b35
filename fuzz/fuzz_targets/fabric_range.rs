//! Fuzzes the fabric's one range check, the region cache in front of it and the ADDR4
//! decoder: never a panic, every accepted range lies inside the region it names, and a
//! cache carried across a run of ranges answers each as the full check does.
//!
//! Input: a generation byte and an ADDR4 word, then ranges of 16 bytes each (address,
//! length), checked in order through one `RegionCache`, both as `check` and as `holds`.
#![no_main]

use dma::addr::RegionCache;
use dma::{Addr4, AddressMap, FabricAddr, Generation};
use libfuzzer_sys::fuzz_target;

fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap_or_default())
}

fuzz_target!(|data: &[u8]| {
    let Some((head, ranges)) = data.split_first_chunk::<5>() else {
        return;
    };
    let map = AddressMap::new(Generation::ALL[usize::from(head[0] % 4)]);
    let raw = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    if let Ok(fabric) = Addr4(raw).to_fabric(&map) {
        assert_eq!(Addr4::from_fabric(fabric, &map).ok(), Some(Addr4(raw)));
    }
    let (mut checks, mut holds) = (RegionCache::default(), RegionCache::default());
    for range in ranges.chunks_exact(16) {
        let (addr, len) = (word(&range[..8]), word(&range[8..]));
        let full = map.check_range(FabricAddr(addr), len);
        if let Ok(region) = &full {
            assert!(addr >= region.base && addr - region.base + len <= region.len);
        }
        let cached = checks.check(&map, FabricAddr(addr), len);
        assert_eq!(cached, full.clone().map(|_| ()), "check of {addr:#x}+{len}");
        if let Some(last) = len.checked_sub(1).and_then(|l| addr.checked_add(l)) {
            let inside = holds.holds(&map, addr, last);
            assert_eq!(inside, full.is_ok(), "holds of {addr:#x}..={last:#x}");
        }
    }
});
