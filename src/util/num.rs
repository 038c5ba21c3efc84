//! Number parsing and formatting (provisional; replaced by the full module).

/// Strict integer parsing like Redis's string2ll.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let t = std::str::from_utf8(s).ok()?;
    if t.starts_with('+') || (t.len() > 1 && t.starts_with('0')) || t.starts_with("-0") {
        return None;
    }
    t.parse().ok()
}

/// Float argument parsing (no spaces, no NaN).
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(s).ok()?;
    if t.is_empty() || t.starts_with(char::is_whitespace) || t.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => t.parse().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// `%.17g`.
pub fn format_double(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let e = format!("{:.16e}", v);
    let (mant, exp) = e.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    if !(-5..17).contains(&exp) {
        let mant = mant.trim_end_matches('0').trim_end_matches('.');
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let decimals = (16 - exp).max(0) as usize;
    let s = format!("{:.*}", decimals, v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// INCRBYFLOAT result text.
pub fn format_incrbyfloat(v: f64) -> Option<String> {
    if !v.is_finite() {
        return None;
    }
    let s = format!("{v}");
    Some(if s == "-0" { "0".into() } else { s })
}
