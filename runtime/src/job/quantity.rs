//! Kubernetes quantities (`64Mi`, `1.5Gi`, `1e3`, `500M`) as sizes in bytes: the parser of
//! every size field of a StreamJob (`spec.diskState.*Size`), and the pattern the CRD gives
//! those fields so that the API server refuses what `weir` refuses.
//!
//! The grammar is Kubernetes' own (`k8s.io/apimachinery/pkg/api/resource`, `Quantity`):
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= <number> | <sign><number>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedInteger> | "E" <signedInteger>
//! ```
//!
//! The value is computed exactly (integers, never a float); a size in bytes must come to a
//! whole number of bytes (`1.5Gi` does, `0.1Ki` and `1m` do not), at least 0 (no `-`) and at most
//! 2^63 - 1, the largest quantity Kubernetes represents.

use crate::job::validate::JobError;

/// The pattern of a quantity string in bytes, as the CRD gives it to the size fields
/// (`pattern` next to `x-kubernetes-int-or-string`; it applies to strings only). It is
/// Kubernetes' quantity grammar without the `-` sign (a size is never negative), written
/// without backslashes so that the same text serves in the CRD's CEL rule
/// ([`BYTE_QUANTITY_RULE`]); it cannot tell whether a value is a whole number of bytes (`1m`
/// matches), which [`parse_byte_quantity`] checks.
pub const BYTE_QUANTITY_PATTERN: &str = "^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$";

/// The longest quantity string taken (the CRD's `maxLength`, which also bounds the cost of its
/// CEL rule on the API server).
pub const MAX_QUANTITY_LENGTH: usize = 64;

/// The CRD's CEL rule of a size field: the API server refuses a string outside the grammar,
/// and a negative integer (`string(-1)` is `-1`), with [`BYTE_QUANTITY_MESSAGE`], which says
/// what to write (a `pattern` mismatch alone only shows the regular expression).
pub const BYTE_QUANTITY_RULE: &str =
    "string(self).matches('^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$')";

/// The API server's message for a size field outside the grammar.
pub const BYTE_QUANTITY_MESSAGE: &str = "must be a Kubernetes quantity in bytes, 0 or more: a number with an optional unit, Ki Mi Gi Ti Pi Ei \
     (powers of 1024) or k M G T P E (powers of 1000), without B: write 64Mi or 64M, not 64MB";

/// The largest size in bytes a quantity may give: 2^63 - 1, Kubernetes' own bound.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// What every refusal ends with: the forms a size takes.
const FORMS: &str = "write a number with an optional unit: `64Mi`, `1.5Gi`, `500M`, `1e9` or `1048576` \
     (units `Ki` `Mi` `Gi` `Ti` `Pi` `Ei` are powers of 1024, `k` `M` `G` `T` `P` `E` powers of 1000)";

/// A quantity's multiplier: a power of 1024 (`Ki` = 1 .. `Ei` = 6) or of 10 (`k` = 3, `m` = -3,
/// `e-2` = -2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Multiplier {
    PowerOf1024(u32),
    PowerOf10(i64),
}

/// The parts of a quantity string that follows the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
struct QuantityParts<'a> {
    negative: bool,
    integer_digits: &'a str,
    fraction_digits: &'a str,
    multiplier: Multiplier,
}

/// The number of bytes a Kubernetes quantity string `text` gives, for the field `field` (its
/// dotted path, named by every error). Errors say what is wrong and what to write: a string
/// outside the grammar (with `64MB`: write `64Mi` or `64M`), a negative size, a value that is not
/// a whole number of bytes (`0.1Ki` is 102.4 bytes: write `102` or `103`), or one above 2^63 - 1.
pub fn parse_byte_quantity(field: &str, text: &str) -> Result<u64, JobError> {
    let refuse = |message: String| JobError::new(field, message);
    if text.trim() != text || text.contains(char::is_whitespace) {
        // The advice is what the value without spaces needs (`1 GiB`: `1Gi` or `1G`, not
        // `1GiB`, which is refused too).
        let joined = text.split_whitespace().collect::<String>();
        let advice = match parse_byte_quantity(field, &joined) {
            Ok(_) => format!("write `{joined}`"),
            Err(e) => format!("without them, {}", e.message),
        };
        return Err(refuse(format!(
            "`{text}` has spaces, which a Kubernetes quantity does not take; {advice}"
        )));
    }
    if text.len() > MAX_QUANTITY_LENGTH {
        return Err(refuse(format!(
            "`{text}` is longer than {MAX_QUANTITY_LENGTH} characters; write a whole number of bytes or a \
             quantity with a unit (`64Mi`, `1.5Gi`)"
        )));
    }
    let parts = split_quantity(text).map_err(refuse)?;
    if parts.negative {
        return Err(refuse(format!(
            "`{text}` is negative (a `-` sign); a size in bytes is 0 or more, written without `-`"
        )));
    }
    let too_large = || format!("`{text}` is too large: a size in bytes is at most {MAX_BYTES} (8Ei - 1)");
    let exact = match exact_value(&parts) {
        Ok(exact) => exact,
        Err(Unrepresentable::TooLarge) => return Err(refuse(too_large())),
        Err(Unrepresentable::TooManyDigits) => {
            return Err(refuse(format!(
                "`{text}` has more than 38 significant digits; write a whole number of bytes with fewer, \
                 or a unit (`64Mi`, `1.5Gi`)"
            )));
        }
        Err(Unrepresentable::BelowOneByte) => {
            return Err(refuse(format!(
                "`{text}` is a tiny fraction of a byte, not a whole number of bytes; write a whole number of \
                 bytes such as `0` or `1`"
            )));
        }
    };
    if exact.numerator % exact.denominator != 0 {
        let floor = exact.numerator / exact.denominator;
        let milli_hint = match parts.multiplier {
            Multiplier::PowerOf10(-3) if text.ends_with('m') => {
                " (`m` is milli, a thousandth: mebibytes are `Mi`, megabytes `M`)"
            }
            _ => "",
        };
        return Err(refuse(format!(
            "`{text}` is {} bytes, not a whole number of bytes{milli_hint}; write a whole number of bytes \
             such as `{floor}` or `{}`, or a quantity that comes to one (`1.5Gi`, `1e6`)",
            exact.decimal(),
            floor + 1
        )));
    }
    u64::try_from(exact.numerator / exact.denominator)
        .ok()
        .filter(|bytes| *bytes <= MAX_BYTES)
        .ok_or_else(|| refuse(too_large()))
}

/// Splits `text` per the grammar, or says why it is not a quantity and what to write.
fn split_quantity(text: &str) -> Result<QuantityParts<'_>, String> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let integer_end = unsigned.find(|c: char| !c.is_ascii_digit()).unwrap_or(unsigned.len());
    let integer_digits = &unsigned[..integer_end];
    let (fraction_digits, suffix) = match unsigned[integer_end..].strip_prefix('.') {
        Some(after_point) => {
            let fraction_end = after_point
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_point.len());
            after_point.split_at(fraction_end)
        }
        None => ("", &unsigned[integer_end..]),
    };
    let not_a_quantity = || match unit_suggestion(&format!("{integer_digits}{}", dotted(fraction_digits)), suffix) {
        Some(suggestion) => format!("`{text}` is not a Kubernetes quantity: {suggestion}"),
        None => format!("`{text}` is not a Kubernetes quantity; {FORMS}"),
    };
    if integer_digits.is_empty() && fraction_digits.is_empty() {
        return Err(not_a_quantity());
    }
    let multiplier = match suffix {
        "" => Multiplier::PowerOf10(0),
        "n" => Multiplier::PowerOf10(-9),
        "u" => Multiplier::PowerOf10(-6),
        "m" => Multiplier::PowerOf10(-3),
        "k" => Multiplier::PowerOf10(3),
        "M" => Multiplier::PowerOf10(6),
        "G" => Multiplier::PowerOf10(9),
        "T" => Multiplier::PowerOf10(12),
        "P" => Multiplier::PowerOf10(15),
        "E" => Multiplier::PowerOf10(18),
        "Ki" => Multiplier::PowerOf1024(1),
        "Mi" => Multiplier::PowerOf1024(2),
        "Gi" => Multiplier::PowerOf1024(3),
        "Ti" => Multiplier::PowerOf1024(4),
        "Pi" => Multiplier::PowerOf1024(5),
        "Ei" => Multiplier::PowerOf1024(6),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E']).ok_or_else(not_a_quantity)?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(not_a_quantity());
            }
            // Beyond ±10^6 the value is 0 or out of range; the exact value below says which.
            let magnitude: i64 = digits.parse::<i64>().unwrap_or(i64::MAX).min(1_000_000);
            Multiplier::PowerOf10(if exponent.starts_with('-') {
                -magnitude
            } else {
                magnitude
            })
        }
    };
    Ok(QuantityParts {
        negative,
        integer_digits,
        fraction_digits,
        multiplier,
    })
}

fn dotted(fraction_digits: &str) -> String {
    match fraction_digits {
        "" => String::new(),
        digits => format!(".{digits}"),
    }
}

/// For a unit Kubernetes does not take but a user means (`MB`, `GiB`, `K`, `gb`, `B`), what to
/// write instead.
fn unit_suggestion(number: &str, suffix: &str) -> Option<String> {
    if number.is_empty() {
        return None;
    }
    let lower = suffix.to_ascii_lowercase();
    if ["b", "byte", "bytes"].contains(&lower.as_str()) {
        return Some(format!("a number of bytes takes no unit; write `{number}`"));
    }
    let mut chars = lower.chars();
    let prefix = chars.next()?;
    let rest = chars.as_str();
    let (binary, decimal) = match prefix {
        'k' => ("Ki", "k"),
        'm' => ("Mi", "M"),
        'g' => ("Gi", "G"),
        't' => ("Ti", "T"),
        'p' => ("Pi", "P"),
        'e' => ("Ei", "E"),
        _ => return None,
    };
    match rest {
        "ib" | "i" => Some(format!(
            "the unit is `{binary}` (a power of 1024, without `B`); write `{number}{binary}`"
        )),
        "b" => Some(format!(
            "units take no `B`; write `{number}{binary}` (a power of 1024) or `{number}{decimal}` (a power of 1000)"
        )),
        "" => Some(format!(
            "units are case-sensitive; write `{number}{binary}` (a power of 1024) or `{number}{decimal}` (a power \
             of 1000)"
        )),
        _ => None,
    }
}

/// A non-negative rational number `numerator / denominator`, the denominator a power of 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExactValue {
    numerator: u128,
    denominator: u128,
}

impl ExactValue {
    /// The value as a decimal number (`102.4`), exact (the denominator is a power of 10).
    fn decimal(&self) -> String {
        let integer = self.numerator / self.denominator;
        let remainder = self.numerator % self.denominator;
        if remainder == 0 {
            return integer.to_string();
        }
        let places = self.denominator.ilog10() as usize;
        let fraction = format!("{remainder:0places$}");
        format!("{integer}.{}", fraction.trim_end_matches('0'))
    }
}

/// Why a quantity has no exact value as a number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unrepresentable {
    /// Far above any size in bytes (beyond 2^128).
    TooLarge,
    /// More than 38 significant digits, which no size in bytes needs.
    TooManyDigits,
    /// Below 10^-38 and not 0: never a whole number of bytes.
    BelowOneByte,
}

/// The exact magnitude of a quantity (its sign aside).
fn exact_value(parts: &QuantityParts) -> Result<ExactValue, Unrepresentable> {
    let all_digits = format!("{}{}", parts.integer_digits, parts.fraction_digits);
    let significant = all_digits.trim_start_matches('0');
    let without_trailing_zeros = significant.trim_end_matches('0');
    if without_trailing_zeros.is_empty() {
        return Ok(ExactValue {
            numerator: 0,
            denominator: 1,
        });
    }
    let trailing_zeros = (significant.len() - without_trailing_zeros.len()) as i64;
    let mantissa: u128 = without_trailing_zeros
        .parse()
        .map_err(|_| Unrepresentable::TooManyDigits)?;
    let mut power_of_10 = trailing_zeros - parts.fraction_digits.len() as i64;
    let mut numerator = mantissa;
    match parts.multiplier {
        Multiplier::PowerOf1024(power) => {
            numerator = numerator
                .checked_mul(1u128 << (10 * power))
                .ok_or(Unrepresentable::TooLarge)?
        }
        Multiplier::PowerOf10(power) => power_of_10 += power,
    }
    if power_of_10 >= 0 {
        return u32::try_from(power_of_10)
            .ok()
            .and_then(|power| 10u128.checked_pow(power))
            .and_then(|scale| numerator.checked_mul(scale))
            .map(|numerator| ExactValue {
                numerator,
                denominator: 1,
            })
            .ok_or(Unrepresentable::TooLarge);
    }
    let denominator = u32::try_from(-power_of_10)
        .ok()
        .and_then(|places| 10u128.checked_pow(places))
        .ok_or(Unrepresentable::BelowOneByte)?;
    Ok(ExactValue { numerator, denominator })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELD: &str = "spec.diskState.cacheSize";

    /// Kubernetes' quantity grammar, exactly, in bytes: every suffix, fractions, exponents,
    /// and the refusals with what each says to write.
    #[test]
    fn byte_quantities_table() {
        let rows: Vec<(&str, Result<u64, &str>)> = vec![
            ("64Mi", Ok(64 << 20)),
            ("1Gi", Ok(1 << 30)),
            ("1.5Gi", Ok(3 << 29)),
            ("0.5Ki", Ok(512)),
            (".5Ki", Ok(512)),
            ("1.Ki", Ok(1024)),
            ("2Ti", Ok(2 << 40)),
            ("1Pi", Ok(1 << 50)),
            ("7Ei", Ok(7 << 60)),
            ("500M", Ok(500_000_000)),
            ("1k", Ok(1_000)),
            ("2.5G", Ok(2_500_000_000)),
            ("3T", Ok(3_000_000_000_000)),
            ("1P", Ok(1_000_000_000_000_000)),
            ("1E", Ok(1_000_000_000_000_000_000)),
            ("1e3", Ok(1_000)),
            ("1E3", Ok(1_000)),
            ("1.5e3", Ok(1_500)),
            ("1e+3", Ok(1_000)),
            ("10e-1", Ok(1)),
            ("15e-1", Err("`15e-1` is 1.5 bytes")),
            ("2000m", Ok(2)),
            ("3000000u", Ok(3)),
            ("4000000000n", Ok(4)),
            ("1048576", Ok(1 << 20)),
            ("+64Mi", Ok(64 << 20)),
            ("0", Ok(0)),
            ("0.0Mi", Ok(0)),
            ("00012", Ok(12)),
            ("9223372036854775807", Ok(MAX_BYTES)),
            (
                "64MB",
                Err("not a Kubernetes quantity: units take no `B`; write `64Mi` (a power of 1024) or `64M`"),
            ),
            ("64mb", Err("write `64Mi` (a power of 1024) or `64M`")),
            ("1GB", Err("write `1Gi` (a power of 1024) or `1G`")),
            ("2KB", Err("write `2Ki` (a power of 1024) or `2k`")),
            (
                "2K",
                Err("units are case-sensitive; write `2Ki` (a power of 1024) or `2k`"),
            ),
            (
                "1.5GiB",
                Err("the unit is `Gi` (a power of 1024, without `B`); write `1.5Gi`"),
            ),
            ("512B", Err("a number of bytes takes no unit; write `512`")),
            (
                "lots",
                Err("`lots` is not a Kubernetes quantity; write a number with an optional unit"),
            ),
            ("Mi", Err("`Mi` is not a Kubernetes quantity; write a number")),
            (".", Err("not a Kubernetes quantity")),
            ("", Err("not a Kubernetes quantity")),
            ("1e", Err("not a Kubernetes quantity")),
            ("1e1.5", Err("not a Kubernetes quantity")),
            ("1Ki1", Err("not a Kubernetes quantity")),
            ("1..5Gi", Err("not a Kubernetes quantity")),
            ("0x10", Err("not a Kubernetes quantity")),
            (
                " 2Ki ",
                Err("has spaces, which a Kubernetes quantity does not take; write `2Ki`"),
            ),
            ("2 Ki", Err("write `2Ki`")),
            (
                "1 GiB",
                Err(
                    "has spaces, which a Kubernetes quantity does not take; without them, `1GiB` is not a \
                     Kubernetes quantity: the unit is `Gi` (a power of 1024, without `B`); write `1Gi`",
                ),
            ),
            ("64 MB", Err("write `64Mi` (a power of 1024) or `64M`")),
            (
                "-1",
                Err("`-1` is negative (a `-` sign); a size in bytes is 0 or more, written without `-`"),
            ),
            ("-0", Err("is negative")),
            ("-1Gi", Err("is negative")),
            (
                "0.1Ki",
                Err(
                    "`0.1Ki` is 102.4 bytes, not a whole number of bytes; write a whole number of bytes such as `102` or `103`",
                ),
            ),
            ("1.5", Err("`1.5` is 1.5 bytes, not a whole number")),
            ("1e-3", Err("is 0.001 bytes")),
            (
                "64m",
                Err(
                    "`64m` is 0.064 bytes, not a whole number of bytes (`m` is milli, a thousandth: mebibytes are `Mi`, megabytes `M`)",
                ),
            ),
            ("1n", Err("is 0.000000001 bytes")),
            (
                "9223372036854775808",
                Err("too large: a size in bytes is at most 9223372036854775807"),
            ),
            ("8Ei", Err("too large")),
            ("99999999999Ti", Err("too large")),
            ("1e30", Err("too large")),
            ("1e999999999999999999999", Err("too large")),
            ("1e-99", Err("`1e-99` is a tiny fraction of a byte")),
            (
                "1.00000000000000000000000000000000000000001",
                Err("more than 38 significant digits"),
            ),
            (
                "123456789012345678901234567890123456789012",
                Err("more than 38 significant digits"),
            ),
            (
                "0000000000000000000000000000000000000000000000000000000000000001",
                Ok(1),
            ),
            (
                "00000000000000000000000000000000000000000000000000000000000000001",
                Err("longer than 64 characters"),
            ),
        ];
        for (text, want) in rows {
            match (parse_byte_quantity(FIELD, text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
                (Err(e), Err(want)) => {
                    assert_eq!(e.field, FIELD, "{text}");
                    assert!(e.message.contains(want), "{text}: {}", e.message);
                }
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// The CRD's pattern and the parser agree: every string the parser takes matches the
    /// pattern (the API server never refuses what `weir` takes), and every string outside the
    /// grammar is refused by both; only values that are not whole bytes pass the pattern alone.
    #[test]
    fn the_crd_pattern_refuses_what_the_parser_refuses() {
        let pattern = regex::Regex::new(BYTE_QUANTITY_PATTERN).unwrap();
        assert!(
            BYTE_QUANTITY_RULE.contains(&format!("'{BYTE_QUANTITY_PATTERN}'")),
            "the CEL rule checks the pattern"
        );
        let grammar_and_whole = [
            "64Mi", "1.5Gi", ".5Ki", "1.Ki", "1e3", "1E3", "1e+3", "10e-1", "2000m", "+1", "0", "1E", "7Ei",
        ];
        for text in grammar_and_whole {
            assert!(parse_byte_quantity(FIELD, text).is_ok(), "{text}");
            assert!(pattern.is_match(text), "pattern refuses {text}");
        }
        let outside_the_grammar = [
            "64MB", "1GiB", "2K", "512B", "lots", "Mi", ".", "", "1e", "1e1.5", "1Ki1", " 2Ki", "2Ki ", "2 Ki", "-1",
            "-0", "0x10", "1..5Gi",
        ];
        for text in outside_the_grammar {
            assert!(parse_byte_quantity(FIELD, text).is_err(), "{text}");
            assert!(!pattern.is_match(text), "pattern takes {text}");
        }
        for not_whole in ["0.1Ki", "1m", "1.5", "1e-3"] {
            assert!(parse_byte_quantity(FIELD, not_whole).is_err(), "{not_whole}");
            assert!(pattern.is_match(not_whole), "{not_whole}");
        }
    }
}
