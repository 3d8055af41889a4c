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
