//! What both stream parsers use to read events without copying them.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, Visitor};

/// A JSON string borrowed from the event's text, or owned when it had
/// escapes to undo. (serde borrows a `Cow<str>` field only when it is not
/// inside an `Option`; this reads `Option<Text>` borrowed too.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'a> Text<'a> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(TextVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Holder<'a> {
        #[serde(default, borrow)]
        text: Option<Text<'a>>,
    }

    #[test]
    fn plain_strings_are_borrowed_escaped_ones_owned_and_null_is_none() {
        let plain: Holder<'_> = serde_json::from_str(r#"{"text":"abc"}"#).unwrap();
        assert!(matches!(plain.text, Some(Text(Cow::Borrowed("abc")))));
        let escaped: Holder<'_> = serde_json::from_str(r#"{"text":"a\"b\u00e9"}"#).unwrap();
        assert_eq!(escaped.text.unwrap().as_str(), "a\"bé");
        let null: Holder<'_> = serde_json::from_str(r#"{"text":null}"#).unwrap();
        assert!(null.text.is_none());
        let missing: Holder<'_> = serde_json::from_str("{}").unwrap();
        assert!(missing.text.is_none());
        assert!(serde_json::from_str::<Holder<'_>>(r#"{"text":1}"#).is_err());
    }
}
