//! Terraform's values as they cross the protocol: cty values in
//! MessagePack (`DynamicValue.msgpack`), or in JSON for stored state
//! (`RawState.json`).
//!
//! A [`Value`] carries no type of its own; encoding walks the schema's
//! [`Type`] beside it, so an object always has every attribute its type
//! names (null when the value has none) and numbers go out as integers when
//! they are whole. Decoding needs no type: a MessagePack map is an object or
//! a map, an extension (cty's unknown, with or without refinements) is
//! [`Value::Unknown`].

use std::collections::BTreeMap;

/// A cty value, as far as this provider's schemas need.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// Not known until apply.
    Unknown,
    Bool(bool),
    Number(f64),
    String(String),
    List(Vec<Value>),
    /// An object or a map.
    Map(BTreeMap<String, Value>),
}

/// A cty type: what a schema's attribute holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    String,
    Number,
    Bool,
    List(Box<Type>),
    Map(Box<Type>),
    Object(Vec<(&'static str, Type)>),
}

impl Type {
    /// The type as Terraform writes types in JSON (`"string"`,
    /// `["map","string"]`, `["object",{...}]`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Type::String => json!("string"),
            Type::Number => json!("number"),
            Type::Bool => json!("bool"),
            Type::List(t) => json!(["list", t.to_json()]),
            Type::Map(t) => json!(["map", t.to_json()]),
            Type::Object(attrs) => {
                let fields: serde_json::Map<String, serde_json::Value> = attrs
                    .iter()
                    .map(|(n, t)| ((*n).to_owned(), t.to_json()))
                    .collect();
                json!(["object", fields])
            }
        }
    }
}

impl Value {
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// A whole number.
    pub fn int(n: impl Into<i64>) -> Value {
        Value::Number(n.into() as f64)
    }

    /// `Some(v)` as a value, `None` as null.
    pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
        v.map(f).unwrap_or(Value::Null)
    }

    pub fn object(fields: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
        Value::Map(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// True when it, and everything in it, is known.
    pub fn is_known(&self) -> bool {
        match self {
            Value::Unknown => false,
            Value::List(items) => items.iter().all(Value::is_known),
            Value::Map(m) => m.values().all(Value::is_known),
            _ => true,
        }
    }

    /// The attribute `name` of an object (null when it has none, or when
    /// this is not an object).
    pub fn get(&self, name: &str) -> &Value {
        match self {
            Value::Map(m) => m.get(name).unwrap_or(&Value::Null),
            _ => &Value::Null,
        }
    }

    /// Sets the attribute `name` of an object (a null value becomes an
    /// empty object first).
    pub fn set(&mut self, name: &str, value: Value) {
        if !matches!(self, Value::Map(_)) {
            *self = Value::Map(BTreeMap::new());
        }
        if let Value::Map(m) = self {
            m.insert(name.to_owned(), value);
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// A whole number that fits `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        let n = self.as_f64()?;
        (n.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&n)).then_some(n as u32)
    }

    /// A map of strings (null entries left out).
    pub fn as_string_map(&self) -> Option<BTreeMap<String, String>> {
        match self {
            Value::Map(m) => Some(
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect(),
            ),
            _ => None,
        }
    }

    pub fn string_map(m: &BTreeMap<String, String>) -> Value {
        Value::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), Value::string(v.clone())))
                .collect(),
        )
    }

    /// The value as JSON state (unknowns as null: state never holds one).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null | Value::Unknown => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => (*n as i64).into(),
            Value::Number(n) => serde_json::Number::from_f64(*n)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::String(s) => s.clone().into(),
            Value::List(items) => items.iter().map(Value::to_json).collect(),
            Value::Map(m) => m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
        }
    }

    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(items) => {
                Value::List(items.iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(m) => Value::Map(
                m.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// A value Terraform sent that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read a value Terraform sent: {0}")]
pub struct DecodeError(String);

/// Encodes `value` as cty MessagePack of type `ty`.
pub fn encode(value: &Value, ty: &Type) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out, value, ty);
    out
}

fn write(out: &mut Vec<u8>, value: &Value, ty: &Type) {
    match (value, ty) {
        (Value::Null, _) => out.push(0xc0),
        // cty's unknown of any type: extension 0 with one zero byte.
        (Value::Unknown, _) => out.extend_from_slice(&[0xd4, 0, 0]),
        (Value::Bool(b), _) => out.push(if *b { 0xc3 } else { 0xc2 }),
        (Value::Number(n), _) => write_number(out, *n),
        (Value::String(s), _) => write_str(out, s),
        (Value::List(items), Type::List(elem)) => {
            write_len(out, items.len(), 0x90, 0xdc);
            for item in items {
                write(out, item, elem);
            }
        }
        (Value::Map(m), Type::Map(elem)) => {
            write_len(out, m.len(), 0x80, 0xde);
            for (k, v) in m {
                write_str(out, k);
                write(out, v, elem);
            }
        }
        (Value::Map(m), Type::Object(attrs)) => {
            write_len(out, attrs.len(), 0x80, 0xde);
            for (name, t) in attrs {
                write_str(out, name);
                write(out, m.get(*name).unwrap_or(&Value::Null), t);
            }
        }
        // A value of another shape than its type: null, which Terraform
        // reports against the attribute rather than failing to decode.
        _ => out.push(0xc0),
    }
}

fn write_number(out: &mut Vec<u8>, n: f64) {
    if n.fract() == 0.0 && n >= i64::MIN as f64 && n <= i64::MAX as f64 {
        let i = n as i64;
        if (0..=0x7f).contains(&i) {
            out.push(i as u8);
        } else if (-32..0).contains(&i) {
            out.push(i as i8 as u8);
        } else {
            out.push(0xd3);
            out.extend_from_slice(&i.to_be_bytes());
        }
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= u8::MAX as usize {
        out.push(0xd9);
        out.push(len as u8);
    } else if len <= u16::MAX as usize {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

/// An array or map header: the fix form below 16, else the 32-bit one
/// (`big`; the 16-bit form is `big - 1`).
fn write_len(out: &mut Vec<u8>, len: usize, fix: u8, big: u8) {
    if len < 16 {
        out.push(fix | len as u8);
    } else if len <= u16::MAX as usize {
        out.push(big);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(big + 1);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

/// Decodes one cty MessagePack value.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let mut r = Reader { bytes, at: 0 };
    let v = r.value(0)?;
    if r.at != bytes.len() {
        return Err(DecodeError(format!(
            "{} bytes left after the value",
            bytes.len() - r.at
        )));
    }
    Ok(v)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Deeper than any value of these schemas.
const MAX_DEPTH: usize = 32;

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| DecodeError("the value ends early".into()))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| acc << 8 | *b as u64))
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError("the value is nested too deeply".into()));
        }
        let marker = self.take(1)?[0];
        Ok(match marker {
            0x00..=0x7f => Value::Number(marker as f64),
            0xe0..=0xff => Value::Number((marker as i8) as f64),
            0xc0 => Value::Null,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xcc => Value::Number(self.uint(1)? as f64),
            0xcd => Value::Number(self.uint(2)? as f64),
            0xce => Value::Number(self.uint(4)? as f64),
            0xcf => Value::Number(self.uint(8)? as f64),
            0xd0 => Value::Number(self.uint(1)? as u8 as i8 as f64),
            0xd1 => Value::Number(self.uint(2)? as u16 as i16 as f64),
            0xd2 => Value::Number(self.uint(4)? as u32 as i32 as f64),
            0xd3 => Value::Number(self.uint(8)? as i64 as f64),
            0xca => Value::Number(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Number(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf => self.string((marker & 0x1f) as usize)?,
            0xd9 | 0xc4 => {
                let n = self.uint(1)? as usize;
                self.string(n)?
            }
            0xda | 0xc5 => {
                let n = self.uint(2)? as usize;
                self.string(n)?
            }
            0xdb | 0xc6 => {
                let n = self.uint(4)? as usize;
                self.string(n)?
            }
            0x90..=0x9f => self.list((marker & 0x0f) as usize, depth)?,
            0xdc => {
                let n = self.uint(2)? as usize;
                self.list(n, depth)?
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.list(n, depth)?
            }
            0x80..=0x8f => self.map((marker & 0x0f) as usize, depth)?,
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(n, depth)?
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(n, depth)?
            }
            // Extensions: cty's unknown (type 0), or a refined unknown.
            0xd4..=0xd8 => {
                let n = 1usize << (marker - 0xd4);
                self.take(1 + n)?;
                Value::Unknown
            }
            0xc7..=0xc9 => {
                let width = 1usize << (marker - 0xc7);
                let n = self.uint(width)? as usize;
                self.take(1 + n)?;
                Value::Unknown
            }
            0xc1 => return Err(DecodeError("the marker 0xc1 is not MessagePack".into())),
        })
    }

    fn string(&mut self, n: usize) -> Result<Value, DecodeError> {
        let bytes = self.take(n)?;
        Ok(Value::String(String::from_utf8_lossy(bytes).into_owned()))
    }

    fn list(&mut self, n: usize, depth: usize) -> Result<Value, DecodeError> {
        let mut items = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::List(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, DecodeError> {
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let key = match self.value(depth + 1)? {
                Value::String(s) => s,
                other => return Err(DecodeError(format!("a map key is not a string: {other:?}"))),
            };
            m.insert(key, self.value(depth + 1)?);
        }
        Ok(Value::Map(m))
    }
}

#[cfg(test)]
mod tests;
