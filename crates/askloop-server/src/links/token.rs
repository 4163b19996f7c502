//! What an answer link carries, and its signature.
//!
//! A link's token is `<claims>.<tag>`: the claims as JSON in unpadded
//! base64url, then HMAC-SHA256 of `askloop-link.v1.<claims>` under the
//! key the claims name, also in unpadded base64url. The claims name the
//! link's row, its run and call, its recipient and when it stops working;
//! changing any byte of them, or signing with a key the server does not
//! hold, makes the token refused before the store is asked anything.
//!
//! Rotating keys: the first configured key signs, every configured key
//! verifies, so links signed with a key being retired keep working until
//! the key is removed.
//!
//! The page's form carries a second tag, bound to the link
//! ([`form_token`]): a POST must send it back. Only a page that could read
//! the link's question (same origin, or the link itself) knows it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::LinkKey;

/// What a link's token says, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Claims {
    /// The id of the key that signed it.
    pub(crate) key: String,
    /// The link's row in the store.
    pub(crate) link: String,
    /// The run.
    pub(crate) run: String,
    /// The call it answers.
    pub(crate) call: String,
    /// Whom it was made out to.
    pub(crate) to: String,
    /// When it stops working, in seconds since the Unix epoch.
    pub(crate) exp: i64,
}

/// Why a token is not one of this server's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadToken {
    /// Not `<claims>.<tag>` in base64url, or the claims are not JSON.
    Malformed,
    /// Signed with a key this server does not hold.
    UnknownKey,
    /// The tag does not match the claims: something was changed.
    WrongSignature,
}

const DOMAIN: &[u8] = b"askloop-link.v1.";
const FORM_DOMAIN: &[u8] = b"askloop-link-form.v1.";

fn mac(key: &LinkKey, domain: &[u8], text: &[u8]) -> Hmac<Sha256> {
    crate::signing::mac(key.secret(), &[domain, text])
}

/// The token of `claims`, signed with `key` (whose id the claims name).
pub(crate) fn sign(claims: &Claims, key: &LinkKey) -> String {
    // Strings and an integer: serialising cannot fail.
    let json = serde_json::to_vec(claims).unwrap_or_default();
    let body = URL_SAFE_NO_PAD.encode(json);
    let tag = mac(key, DOMAIN, body.as_bytes()).finalize().into_bytes();
    format!("{body}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// The claims of `token` if one of `keys` signed it (compared in constant
/// time).
pub(crate) fn verify(token: &str, keys: &[LinkKey]) -> Result<Claims, BadToken> {
    let (body, tag) = token.split_once('.').ok_or(BadToken::Malformed)?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| BadToken::Malformed)?;
    let json = URL_SAFE_NO_PAD.decode(body).map_err(|_| BadToken::Malformed)?;
    let claims: Claims = serde_json::from_slice(&json).map_err(|_| BadToken::Malformed)?;
    let key = keys.iter().find(|k| k.id() == claims.key).ok_or(BadToken::UnknownKey)?;
    mac(key, DOMAIN, body.as_bytes())
        .verify_slice(&tag)
        .map_err(|_| BadToken::WrongSignature)?;
    Ok(claims)
}

/// The form token of a link's page: bound to the link's id, under the key
/// that signed the link.
pub(crate) fn form_token(claims: &Claims, key: &LinkKey) -> String {
    URL_SAFE_NO_PAD.encode(mac(key, FORM_DOMAIN, claims.link.as_bytes()).finalize().into_bytes())
}

/// Whether `sent` is the form token of the link (compared in constant time).
pub(crate) fn form_token_matches(sent: &str, claims: &Claims, keys: &[LinkKey]) -> bool {
    let Some(key) = keys.iter().find(|k| k.id() == claims.key) else {
        return false;
    };
    let Ok(sent) = URL_SAFE_NO_PAD.decode(sent) else {
        return false;
    };
    mac(key, FORM_DOMAIN, claims.link.as_bytes())
        .verify_slice(&sent)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            key: "k1".into(),
            link: "lnk_1".into(),
            run: "run-1".into(),
            call: "call-1".into(),
            to: "Alice".into(),
            exp: 1_900_000_000,
        }
    }

    fn key(id: &str, secret: &str) -> LinkKey {
        LinkKey::new(id, secret.as_bytes().to_vec())
    }

    #[test]
    fn a_signed_token_verifies_under_any_configured_key_with_its_id() {
        let old = key("k1", "an-old-secret-of-thirty-two-chars!");
        let new = key("k2", "a-new-secret-of-thirty-two-chars!!");
        let token = sign(&claims(), &old);
        assert_eq!(verify(&token, &[new.clone(), old.clone()]), Ok(claims()));
        assert_eq!(
            verify(&token, &[new]),
            Err(BadToken::UnknownKey),
            "a removed key verifies nothing"
        );
    }

    #[test]
    fn a_changed_claim_or_tag_is_refused() {
        let k = key("k1", "a-secret-of-at-least-thirty-two-chars");
        let token = sign(&claims(), &k);
        let (body, tag) = token.split_once('.').unwrap();
        let mut other = claims();
        other.to = "Mallory".into();
        let forged_body = sign(&other, &key("k1", "someone-elses-secret-of-32-chars!!"))
            .split_once('.')
            .unwrap()
            .0
            .to_owned();
        assert_eq!(
            verify(&format!("{forged_body}.{tag}"), std::slice::from_ref(&k)),
            Err(BadToken::WrongSignature)
        );
        let mut flipped = tag.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(
            verify(&format!("{body}.{flipped}"), std::slice::from_ref(&k)),
            Err(BadToken::WrongSignature)
        );
        assert_eq!(
            verify("not a token", std::slice::from_ref(&k)),
            Err(BadToken::Malformed)
        );
        assert_eq!(verify(body, &[k]), Err(BadToken::Malformed));
    }

    #[test]
    fn the_form_token_is_bound_to_its_link() {
        let k = key("k1", "a-secret-of-at-least-thirty-two-chars");
        let token = form_token(&claims(), &k);
        assert!(form_token_matches(&token, &claims(), std::slice::from_ref(&k)));
        let mut other = claims();
        other.link = "lnk_2".into();
        assert!(!form_token_matches(&token, &other, std::slice::from_ref(&k)));
        assert!(!form_token_matches("", &claims(), &[k]));
    }
}
