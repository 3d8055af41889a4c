use super::*;

fn object_type() -> Type {
    Type::Object(vec![
        ("name", Type::String),
        ("memory_mb", Type::Number),
        ("ratio", Type::Number),
        ("enabled", Type::Bool),
        ("env", Type::Map(Box::new(Type::String))),
        ("items", Type::List(Box::new(Type::Number))),
        ("missing", Type::String),
    ])
}

#[test]
fn a_value_encoded_then_decoded_is_the_same_with_every_attribute_of_its_type() {
    let long = "x".repeat(70_000);
    let v = Value::object([
        ("name", Value::string("hello")),
        ("memory_mb", Value::int(128)),
        ("ratio", Value::Number(0.25)),
        ("enabled", Value::Bool(true)),
        (
            "env",
            Value::Map(
                [("A".to_owned(), Value::string(long.clone()))]
                    .into_iter()
                    .collect(),
            ),
        ),
        (
            "items",
            Value::List((0..20).map(|i| Value::int(i * 1000 - 5)).collect()),
        ),
    ]);
    let back = decode(&encode(&v, &object_type())).unwrap();
    let mut want = v.clone();
    want.set("missing", Value::Null);
    assert_eq!(back, want);
}

#[test]
fn unknowns_go_out_as_ctys_extension_and_any_extension_reads_as_unknown() {
    assert_eq!(encode(&Value::Unknown, &Type::String), vec![0xd4, 0, 0]);
    // A refined unknown (extension 12 with a payload).
    assert_eq!(
        decode(&[0xc7, 3, 12, 0x81, 0x01, 0xc3]).unwrap(),
        Value::Unknown
    );
    let v = Value::object([("name", Value::Unknown)]);
    let back = decode(&encode(&v, &Type::Object(vec![("name", Type::String)]))).unwrap();
    assert_eq!(back.get("name"), &Value::Unknown);
    assert!(!back.is_known());
}

#[test]
fn whole_numbers_are_integers_and_others_floats() {
    assert_eq!(encode(&Value::int(5), &Type::Number), vec![5]);
    assert_eq!(encode(&Value::int(-3), &Type::Number), vec![0xfd]);
    assert_eq!(encode(&Value::int(300), &Type::Number)[0], 0xd3);
    assert_eq!(encode(&Value::Number(1.5), &Type::Number)[0], 0xcb);
    for bytes in [
        vec![0xcc, 200],
        vec![0xcd, 1, 0],
        vec![0xd0, 0x9c],
        vec![0xca, 0x3f, 0xc0, 0, 0],
    ] {
        assert!(
            matches!(decode(&bytes).unwrap(), Value::Number(_)),
            "{bytes:?}"
        );
    }
    assert_eq!(decode(&[0xd0, 0x9c]).unwrap(), Value::int(-100));
    assert_eq!(
        decode(&[0xca, 0x3f, 0xc0, 0, 0]).unwrap(),
        Value::Number(1.5)
    );
}

#[test]
fn broken_or_hostile_bytes_are_an_error_not_a_panic() {
    for bytes in [
        vec![0xa5, b'a'],                   // a string shorter than it says
        vec![0xdd, 0xff, 0xff, 0xff, 0xff], // a huge array with nothing in it
        vec![0x81, 0x01, 0x02],             // a map key that is not a string
        vec![0xc1],                         // never used
        vec![0xc0, 0xc0],                   // bytes after the value
    ] {
        assert!(decode(&bytes).is_err(), "{bytes:?}");
    }
    let deep: Vec<u8> = std::iter::repeat_n(0x91, 100).chain([0xc0]).collect();
    assert!(decode(&deep).is_err());
}

#[test]
fn json_state_reads_as_the_same_value() {
    let json = serde_json::json!({"name": "a", "n": 3, "m": {"k": "v"}, "l": [true], "z": null});
    let v = Value::from_json(&json);
    assert_eq!(v.get("n").as_u32(), Some(3));
    assert_eq!(v.to_json(), json);
}

#[test]
fn types_are_written_as_terraform_writes_them() {
    assert_eq!(
        Type::Map(Box::new(Type::String)).to_json().to_string(),
        r#"["map","string"]"#
    );
    assert_eq!(
        Type::List(Box::new(Type::Object(vec![("a", Type::Bool)])))
            .to_json()
            .to_string(),
        r#"["list",["object",{"a":"bool"}]]"#
    );
}
