//! Address classification and the allowlist, checked against the IANA
//! special-purpose registries. Pure: nothing here touches the network (the
//! public examples are only classified, never contacted).

use std::net::IpAddr;

use agora_fetch::{AddressClass, FetchPolicy, classify, is_allowed};

fn check(cases: &[(&str, AddressClass)]) {
    let mut failures = Vec::new();
    for (address, expected) in cases {
        let ip: IpAddr = address.parse().expect("test addresses are valid literals");
        let actual = classify(ip);
        if actual != *expected {
            failures.push(format!("{address}: expected {expected:?}, got {actual:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn special_ipv4_ranges_are_classified() {
    use AddressClass::*;
    check(&[
        ("0.0.0.0", Unspecified),
        ("0.1.2.3", Other("this network")),
        ("0.255.255.255", Other("this network")),
        ("10.0.0.1", Private),
        ("10.255.255.255", Private),
        ("100.64.0.1", SharedAddressSpace),
        ("100.127.255.255", SharedAddressSpace),
        ("127.0.0.1", Loopback),
        ("127.255.255.254", Loopback),
        ("169.254.169.254", LinkLocal),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("192.0.0.1", Other("IETF protocol assignments")),
        ("192.0.2.1", Documentation),
        ("192.88.99.1", Other("6to4 relay anycast")),
        ("192.168.1.1", Private),
        ("198.18.0.1", Other("benchmarking")),
        ("198.19.255.255", Other("benchmarking")),
        ("198.51.100.7", Documentation),
        ("203.0.113.9", Documentation),
        ("224.0.0.1", Multicast),
        ("239.255.255.250", Multicast),
        ("240.0.0.1", Reserved),
        ("254.1.2.3", Reserved),
        ("255.255.255.254", Reserved),
        ("255.255.255.255", Broadcast),
    ]);
}

#[test]
fn ipv4_range_edges_are_public() {
    check(&[
        ("8.8.8.8", AddressClass::Public),
        ("1.1.1.1", AddressClass::Public),
        ("1.0.0.0", AddressClass::Public),
        ("9.255.255.255", AddressClass::Public),
        ("11.0.0.0", AddressClass::Public),
        ("100.63.255.255", AddressClass::Public),
        ("100.128.0.0", AddressClass::Public),
        ("126.255.255.255", AddressClass::Public),
        ("128.0.0.0", AddressClass::Public),
        ("172.15.255.255", AddressClass::Public),
        ("172.32.0.0", AddressClass::Public),
        ("192.0.1.1", AddressClass::Public),
        ("192.169.0.0", AddressClass::Public),
        ("198.17.255.255", AddressClass::Public),
        ("198.20.0.0", AddressClass::Public),
        ("223.255.255.255", AddressClass::Public),
    ]);
}

#[test]
fn special_ipv6_ranges_are_classified() {
    use AddressClass::*;
    check(&[
        ("::", Unspecified),
        ("::1", Loopback),
        ("fe80::1", LinkLocal),
        ("febf:ffff::1", LinkLocal),
        ("fc00::1", UniqueLocal),
        ("fd12:3456::1", UniqueLocal),
        ("fec0::1", Other("site-local")),
        ("ff02::1", Multicast),
        ("2001:db8::1", Documentation),
        ("3fff::1", Documentation),
        ("100::1", Other("discard")),
        ("2001::1", Other("teredo")),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Other("teredo")),
        ("2001:2::1", Other("benchmarking")),
        ("2001:10::1", Other("IETF protocol assignments")),
        ("64:ff9b:1::1", Other("local-use NAT64")),
        ("4000::1", Reserved),
        ("1::1", Reserved),
        ("::1:0:0:1", Reserved),
    ]);
}

#[test]
fn ipv6_forms_embedding_ipv4_take_the_embedded_class() {
    use AddressClass::*;
    check(&[
        // IPv4-mapped: special inside is refused as mapped, public is public.
        ("::ffff:127.0.0.1", Ipv4Mapped),
        ("::ffff:10.0.0.1", Ipv4Mapped),
        ("::ffff:169.254.169.254", Ipv4Mapped),
        ("::ffff:8.8.8.8", Public),
        // IPv4-compatible (deprecated): never public.
        ("::127.0.0.1", Loopback),
        ("::10.0.0.1", Private),
        ("::8.8.8.8", Other("IPv4-compatible")),
        // NAT64 well-known prefix.
        ("64:ff9b::7f00:1", Loopback),
        ("64:ff9b::a9fe:a9fe", LinkLocal),
        ("64:ff9b::808:808", Public),
        // 6to4.
        ("2002:7f00:1::", Loopback),
        ("2002:c0a8:101::1", Private),
        ("2002:808:808::1", Public),
    ]);
}

#[test]
fn global_ipv6_unicast_is_public() {
    check(&[
        ("2001:4860:4860::8888", AddressClass::Public),
        ("2606:4700:4700::1111", AddressClass::Public),
        ("2a00:1450::1", AddressClass::Public),
        ("2001:200::1", AddressClass::Public),
    ]);
}

#[test]
fn allowlist_admits_exactly_the_listed_networks() {
    let ip = |text: &str| -> IpAddr { text.parse().expect("test addresses are valid literals") };
    let default = FetchPolicy::default();
    assert_eq!(is_allowed(ip("8.8.8.8"), &default), Ok(()));
    assert_eq!(is_allowed(ip("2001:4860:4860::8888"), &default), Ok(()));
    assert_eq!(
        is_allowed(ip("127.0.0.1"), &default),
        Err(AddressClass::Loopback)
    );
    assert_eq!(is_allowed(ip("::1"), &default), Err(AddressClass::Loopback));
    assert_eq!(
        is_allowed(ip("10.1.2.3"), &default),
        Err(AddressClass::Private)
    );

    let loopback = FetchPolicy::default().allowing_loopback();
    assert_eq!(is_allowed(ip("127.0.0.1"), &loopback), Ok(()));
    assert_eq!(is_allowed(ip("127.8.9.10"), &loopback), Ok(()));
    assert_eq!(is_allowed(ip("::1"), &loopback), Ok(()));
    assert_eq!(
        is_allowed(ip("10.1.2.3"), &loopback),
        Err(AddressClass::Private)
    );
    // The allowlist matches addresses as written, so no IPv6 form of loopback
    // rides on the IPv4 entry.
    assert_eq!(
        is_allowed(ip("::ffff:127.0.0.1"), &loopback),
        Err(AddressClass::Ipv4Mapped)
    );
    assert_eq!(
        is_allowed(ip("64:ff9b::7f00:1"), &loopback),
        Err(AddressClass::Loopback)
    );

    let twice = FetchPolicy::default()
        .allowing_loopback()
        .allowing_loopback();
    assert_eq!(
        twice.allowed_networks.len(),
        2,
        "allowing_loopback is idempotent"
    );

    let office = FetchPolicy {
        allowed_networks: vec!["10.20.0.0/16".parse().expect("valid network")],
        ..FetchPolicy::default()
    };
    assert_eq!(is_allowed(ip("10.20.30.40"), &office), Ok(()));
    assert_eq!(
        is_allowed(ip("10.21.0.1"), &office),
        Err(AddressClass::Private)
    );
}

#[test]
fn defaults_are_the_documented_ones() {
    let policy = FetchPolicy::default();
    assert!(policy.allowed_networks.is_empty());
    assert!(policy.allow_http);
    assert_eq!(policy.timeout, std::time::Duration::from_secs(10));
    assert_eq!(policy.max_bytes, 256 * 1024);
    assert_eq!(policy.max_redirects, 3);
    assert!(policy.user_agent.starts_with("agora/"));
}
