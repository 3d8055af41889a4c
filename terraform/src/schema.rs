//! Schemas: what each resource, data source and the provider block take
//! and give, in the terms Terraform's protocol uses, and the cty type of a
//! whole block's value.

use crate::proto::tfplugin6::schema;
use crate::value::Type;

/// How an attribute is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The configuration must set it.
    Required,
    /// The configuration may set it; left out, it is null.
    Optional,
    /// The provider sets it.
    Computed,
    /// The configuration may set it; left out, the provider does.
    OptionalComputed,
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub name: &'static str,
    pub ty: Type,
    pub mode: Mode,
    /// Never shown in plan or apply output.
    pub sensitive: bool,
    pub description: &'static str,
}

impl Attr {
    pub fn new(name: &'static str, ty: Type, mode: Mode, description: &'static str) -> Attr {
        Attr {
            name,
            ty,
            mode,
            sensitive: false,
            description,
        }
    }

    pub fn sensitive(mut self) -> Attr {
        self.sensitive = true;
        self
    }
}

/// A block nested once (`timeouts { ... }`).
#[derive(Debug, Clone)]
pub struct Nested {
    pub name: &'static str,
    pub block: Block,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub description: &'static str,
    pub attrs: Vec<Attr>,
    pub blocks: Vec<Nested>,
}

impl Block {
    /// The type of the block's value: an object of its attributes and
    /// nested blocks.
    pub fn ty(&self) -> Type {
        let mut fields: Vec<(&'static str, Type)> =
            self.attrs.iter().map(|a| (a.name, a.ty.clone())).collect();
        fields.extend(self.blocks.iter().map(|n| (n.name, n.block.ty())));
        Type::Object(fields)
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|a| a.name == name)
    }

    fn to_proto(&self) -> schema::Block {
        schema::Block {
            version: 0,
            attributes: self
                .attrs
                .iter()
                .map(|a| schema::Attribute {
                    name: a.name.to_owned(),
                    r#type: a.ty.to_json().to_string().into_bytes(),
                    description: a.description.to_owned(),
                    required: a.mode == Mode::Required,
                    optional: matches!(a.mode, Mode::Optional | Mode::OptionalComputed),
                    computed: matches!(a.mode, Mode::Computed | Mode::OptionalComputed),
                    sensitive: a.sensitive,
                    description_kind: 0,
                    deprecated: false,
                })
                .collect(),
            block_types: self
                .blocks
                .iter()
                .map(|n| schema::NestedBlock {
                    type_name: n.name.to_owned(),
                    block: Some(n.block.to_proto()),
                    nesting: schema::nested_block::NestingMode::Single as i32,
                    min_items: 0,
                    max_items: 0,
                })
                .collect(),
            description: self.description.to_owned(),
            description_kind: 0,
            deprecated: false,
        }
    }

    pub fn schema(&self) -> crate::proto::tfplugin6::Schema {
        crate::proto::tfplugin6::Schema {
            version: 0,
            block: Some(self.to_proto()),
        }
    }
}

/// The `timeouts` block of a resource: how long each operation may take,
/// as Terraform writes durations (`"30s"`, `"5m"`, `"1h"`).
pub fn timeouts(ops: &[&'static str]) -> Nested {
    Nested {
        name: "timeouts",
        block: Block {
            description: "How long each operation may take (`30s`, `5m`, `1h30m`).",
            attrs: ops
                .iter()
                .map(|op| Attr::new(op, Type::String, Mode::Optional, ""))
                .collect(),
            blocks: vec![],
        },
    }
}

/// Reads a duration as Terraform writes them: numbers with the units `h`,
/// `m`, `s` (`"90s"`, `"1h30m"`, `"2.5m"`).
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let mut total = 0.0f64;
    let mut number = String::new();
    let mut any = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
        let n: f64 = number.parse().ok()?;
        total += n * unit;
        number.clear();
        any = true;
    }
    if !number.is_empty() || !any || !total.is_finite() {
        return None;
    }
    Some(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_as_terraform_writes_them() {
        for (text, secs) in [
            ("30s", 30.0),
            ("5m", 300.0),
            ("1h30m", 5400.0),
            ("2.5m", 150.0),
        ] {
            assert_eq!(
                parse_duration(text),
                Some(Duration::from_secs_f64(secs)),
                "{text}"
            );
        }
        for bad in ["", "5", "m", "5d", "-5m", "5m3"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
