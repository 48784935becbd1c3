//! The user name and groups in an identity provider's claims, wherever the settings say they are
//! (`--oidc-username-claim`, `--oidc-groups-claim`): in the ID token, else in the UserInfo answer.

use serde_json::{Map, Value};

/// The claims of a signature-checked JWT: its payload, as JSON. `None` when it is not a JWS of three
/// parts with a JSON object in the middle (an ID token that passed the library's checks always is).
pub fn payload(jwt: &str) -> Option<Map<String, Value>> {
    use base64::Engine as _;
    let mut parts = jwt.split('.');
    let (_header, body, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body.trim_end_matches('=')).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(claims) => Some(claims),
        _ => None,
    }
}

/// A claim by name; a name with dots that is not a claim itself is a path into nested objects
/// (Keycloak's `realm_access.roles`).
pub fn find<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(name) {
        return Some(value);
    }
    let mut parts = name.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// The user name: a string claim.
pub fn user(claims: &Map<String, Value>, name: &str) -> Option<String> {
    find(claims, name)?.as_str().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// The groups: an array of strings (others in it skipped), or one string of names separated by ',' or
/// '|' as proxies send them; at most 200. `None` when the claim is absent.
pub fn groups(claims: &Map<String, Value>, name: &str) -> Option<Vec<String>> {
    let names: Vec<String> = match find(claims, name)? {
        Value::Array(items) => items.iter().filter_map(Value::as_str).map(|g| g.trim().to_owned()).collect(),
        Value::String(text) => super::super::groups::split_groups(text).into_iter().map(str::to_owned).collect(),
        _ => return Some(Vec::new()),
    };
    Some(names.into_iter().filter(|g| !g.is_empty()).take(200).collect())
}

/// `--oidc-username-claim` and `--oidc-groups-claim`: a claim name, or a dotted path (1–128 of letters,
/// digits, `_ - : .`).
pub fn parse_claim(value: &str) -> Result<String, String> {
    let name = value.trim();
    let ok = |c: char| c.is_ascii_alphanumeric() || "_-:.".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(ok) || name.starts_with('.') || name.ends_with('.') {
        return Err(format!(
            "'{value}' is not a claim name: give letters, digits, '_', '-' or ':', with '.' between the parts of a \
             nested claim (e.g. preferred_username, groups, realm_access.roles)"
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn reads_a_jwts_payload() {
        use base64::Engine as _;
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"ana","groups":["g"]}"#);
        let jwt = format!("eyJhbGciOiJSUzI1NiJ9.{body}.c2ln");
        assert_eq!(payload(&jwt).unwrap()["sub"], "ana");
        assert_eq!(payload("a.b"), None);
        assert_eq!(payload(&format!("{jwt}.extra")), None);
        assert_eq!(payload("a.!!!.c"), None);
        let array = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"[1]");
        assert_eq!(payload(&format!("h.{array}.s")), None, "claims are an object");
    }

    #[test]
    fn finds_names_and_groups_where_providers_put_them() {
        let c = claims(
            r#"{"preferred_username":" ana ","email":"ana@lab.example.org","groups":["gpu-admins",3," staff "],
                "realm_access":{"roles":["gpu-users"]},"roles":"a|b, c","n":5,"empty":""}"#,
        );
        assert_eq!(user(&c, "preferred_username").as_deref(), Some("ana"));
        assert_eq!(user(&c, "email").as_deref(), Some("ana@lab.example.org"));
        assert_eq!(user(&c, "n"), None, "not a string");
        assert_eq!(user(&c, "empty"), None);
        assert_eq!(user(&c, "missing"), None);
        assert_eq!(groups(&c, "groups").unwrap(), ["gpu-admins", "staff"]);
        assert_eq!(groups(&c, "realm_access.roles").unwrap(), ["gpu-users"]);
        assert_eq!(groups(&c, "roles").unwrap(), ["a", "b", "c"]);
        assert_eq!(groups(&c, "n").unwrap(), Vec::<String>::new(), "present but no names: no groups");
        assert_eq!(groups(&c, "missing"), None);
    }

    #[test]
    fn claim_flags_are_checked() {
        assert_eq!(parse_claim(" realm_access.roles ").unwrap(), "realm_access.roles");
        assert!(parse_claim("a b").unwrap_err().contains("not a claim name"));
        assert!(parse_claim(".groups").is_err() && parse_claim("").is_err());
    }
}
