use super::*;

#[test]
fn the_path_splits_into_namespace_name_and_the_raw_suffix() {
    assert_eq!(split_path("/fn/a/b"), Some(("a", "b", "")));
    assert_eq!(split_path("/fn/a/b/"), Some(("a", "b", "/")));
    assert_eq!(split_path("/fn/a/b/c%2Fd/e"), Some(("a", "b", "/c%2Fd/e")));
    assert_eq!(split_path("/fn/a"), None);
    assert_eq!(split_path("/v1/a/b"), None);
}

#[test]
fn only_sless_and_sixteen_lowercase_hex_digits_is_a_namespace() {
    assert!(is_user_namespace("sless-ffd1f598c169b0ae"));
    for bad in [
        "sless-ffd1f598c169b0a",
        "sless-ffd1f598c169b0aef",
        "sless-FFD1F598C169B0AE",
        "sless-ffd1f598c169b0ag",
        "default",
        "kube-system",
        "xsless-ffd1f598c169b0ae",
        "",
    ] {
        assert!(!is_user_namespace(bad), "{bad:?}");
    }
}

#[test]
fn hop_by_hop_headers_go_and_so_do_those_connection_names() {
    let mut h = HeaderMap::new();
    for (n, v) in [
        ("connection", "close, x-secret"),
        ("connection", "X-Other"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("trailer", "x-sum"),
        ("upgrade", "h2c"),
        ("proxy-authorization", "Basic x"),
        ("x-secret", "1"),
        ("x-other", "2"),
        ("x-kept", "3"),
    ] {
        h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
    }
    strip_hop_by_hop(&mut h);
    let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
    assert_eq!(left, ["x-kept"]);
}
