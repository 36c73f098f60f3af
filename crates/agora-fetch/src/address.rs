//! Which IP addresses a fetch may connect to.
//!
//! [`classify`] sorts an address into the special-purpose ranges of the IANA
//! registries (RFC 6890 and successors). Only [`AddressClass::Public`] is
//! fetched from by default; everything else needs the operator's allowlist.
//!
//! IPv6 has several ways of carrying an IPv4 address (mapped, compatible,
//! NAT64, 6to4). An attacker can use them to reach a private IPv4 host through
//! an address that does not look private, so those forms are classified by
//! the IPv4 address they embed. IPv6 is public only inside global unicast
//! `2000::/3`; everything unassigned is [`AddressClass::Reserved`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::FetchPolicy;

/// The kind of network an IP address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Globally reachable: fetched from without asking.
    Public,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 private IPv4: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `255.255.255.255`.
    Broadcast,
    /// Ranges set aside for examples: `192.0.2/24`, `198.51.100/24`,
    /// `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// Carrier-grade NAT space `100.64/10`.
    SharedAddressSpace,
    /// Reserved for future use (`240/4`) or unassigned IPv6 outside
    /// `2000::/3`.
    Reserved,
    /// IPv6 unique local addresses `fc00::/7`.
    UniqueLocal,
    /// An IPv4-mapped IPv6 address (`::ffff:0:0/96`) whose embedded IPv4
    /// address is not public; one with a public IPv4 address is `Public`.
    Ipv4Mapped,
    /// Any other special-purpose range, named (for example `"teredo"`,
    /// `"benchmarking"`, `"this network"`).
    Other(&'static str),
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Documentation => "documentation",
            AddressClass::SharedAddressSpace => "shared address space",
            AddressClass::Reserved => "reserved",
            AddressClass::UniqueLocal => "unique local",
            AddressClass::Ipv4Mapped => "IPv4-mapped non-public",
            AddressClass::Other(name) => name,
        })
    }
}

/// Special IPv4 ranges, most specific first: (network, prefix length, class).
const V4_RANGES: &[([u8; 4], u32, AddressClass)] = &[
    ([0, 0, 0, 0], 32, AddressClass::Unspecified),
    ([0, 0, 0, 0], 8, AddressClass::Other("this network")),
    ([10, 0, 0, 0], 8, AddressClass::Private),
    ([100, 64, 0, 0], 10, AddressClass::SharedAddressSpace),
    ([127, 0, 0, 0], 8, AddressClass::Loopback),
    ([169, 254, 0, 0], 16, AddressClass::LinkLocal),
    ([172, 16, 0, 0], 12, AddressClass::Private),
    (
        [192, 0, 0, 0],
        24,
        AddressClass::Other("IETF protocol assignments"),
    ),
    ([192, 0, 2, 0], 24, AddressClass::Documentation),
    (
        [192, 88, 99, 0],
        24,
        AddressClass::Other("6to4 relay anycast"),
    ),
    ([192, 168, 0, 0], 16, AddressClass::Private),
    ([198, 18, 0, 0], 15, AddressClass::Other("benchmarking")),
    ([198, 51, 100, 0], 24, AddressClass::Documentation),
    ([203, 0, 113, 0], 24, AddressClass::Documentation),
    ([224, 0, 0, 0], 4, AddressClass::Multicast),
    ([255, 255, 255, 255], 32, AddressClass::Broadcast),
    ([240, 0, 0, 0], 4, AddressClass::Reserved),
];

/// How an IPv6 range is classified.
#[derive(Clone, Copy)]
enum V6Rule {
    /// The range has a fixed class.
    Class(AddressClass),
    /// The range embeds an IPv4 address starting at this bit offset (counted
    /// from the most significant bit); it takes that address's class.
    EmbeddedV4 { offset: u32 },
}

/// Special IPv6 ranges after the `::/96` and `::ffff:0:0/96` forms, most
/// specific first: (network, prefix length, rule).
#[rustfmt::skip]
const V6_RANGES: &[([u16; 8], u32, V6Rule)] = &[
    ([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, V6Rule::EmbeddedV4 { offset: 96 }),
    ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, V6Rule::Class(AddressClass::Other("local-use NAT64"))),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, V6Rule::Class(AddressClass::Other("discard"))),
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, V6Rule::Class(AddressClass::Other("teredo"))),
    ([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, V6Rule::Class(AddressClass::Other("benchmarking"))),
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, V6Rule::Class(AddressClass::Other("IETF protocol assignments"))),
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, V6Rule::Class(AddressClass::Documentation)),
    ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, V6Rule::EmbeddedV4 { offset: 16 }),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, V6Rule::Class(AddressClass::Documentation)),
    ([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, V6Rule::Class(AddressClass::Public)),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, V6Rule::Class(AddressClass::UniqueLocal)),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, V6Rule::Class(AddressClass::LinkLocal)),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, V6Rule::Class(AddressClass::Other("site-local"))),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, V6Rule::Class(AddressClass::Multicast)),
];

/// Sorts an address into its special-purpose range, or [`AddressClass::Public`].
///
/// Pure: it looks at the address only, never at the network.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Decides whether a fetch may connect to `ip`: public addresses always, and
/// others only inside one of the operator's `allowed_networks`. The refusal
/// carries the class so that the error can say what was refused.
pub fn is_allowed(ip: IpAddr, policy: &FetchPolicy) -> Result<(), AddressClass> {
    match classify(ip) {
        AddressClass::Public => Ok(()),
        _ if policy
            .allowed_networks
            .iter()
            .any(|network| network.contains(&ip)) =>
        {
            Ok(())
        }
        class => Err(class),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let bits = u32::from(ip);
    V4_RANGES
        .iter()
        .find(|(network, prefix, _)| {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            bits & mask == u32::from_be_bytes(*network) & mask
        })
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let bits = u128::from(ip);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return match classify_v4(v4) {
            AddressClass::Public => AddressClass::Public,
            _ => AddressClass::Ipv4Mapped,
        };
    }
    match bits {
        0 => return AddressClass::Unspecified,
        1 => return AddressClass::Loopback,
        _ => {}
    }
    if bits >> 32 == 0 {
        // IPv4-compatible `::a.b.c.d` (RFC 4291, deprecated): nothing
        // legitimate lives there, so even a public embedded address is refused.
        return match classify_v4(Ipv4Addr::from(bits as u32)) {
            AddressClass::Public => AddressClass::Other("IPv4-compatible"),
            class => class,
        };
    }
    let rule = V6_RANGES.iter().find(|(network, prefix, _)| {
        let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
        bits & mask == u128::from(Ipv6Addr::from(*network)) & mask
    });
    match rule {
        Some((_, _, V6Rule::Class(class))) => *class,
        Some((_, _, V6Rule::EmbeddedV4 { offset })) => {
            // Truncation keeps exactly the 32 bits that start at `offset`.
            classify_v4(Ipv4Addr::from((bits >> (96 - offset)) as u32))
        }
        None => AddressClass::Reserved,
    }
}
