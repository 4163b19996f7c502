//! HMAC-SHA256 of a message given in parts: the one set-up the answer
//! links' tokens, Slack's request signatures and the webhooks' signatures
//! share. Each caller keeps its own message layout and encoding.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The MAC of `parts`, one after another, keyed with `secret`: finalize it
/// for a tag, or `verify_slice` a tag received (in constant time).
pub(crate) fn mac(secret: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        unreachable!("HMAC accepts keys of every length")
    };
    for part in parts {
        mac.update(part);
    }
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_of_parts_is_the_mac_of_their_concatenation_and_matches_rfc_4231() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let tag = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"])
            .finalize()
            .into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(
            mac(b"Jefe", &[b"what do ya want for nothing?"])
                .verify_slice(&tag)
                .is_ok()
        );
        assert!(
            mac(b"Jefe", &[b"what do ya want for nothing!"])
                .verify_slice(&tag)
                .is_err()
        );
    }
}
