//! An agent's `elicitation/create` as a person is asked it, with no terminal in sight: the
//! question ([`ElicitationQuestion`]: a form's fields in the agent's order, or a URL to
//! visit), the typed answer to each field ([`FormField::answer`], checked against the field's
//! schema by the same rules as `--elicitation-answers`), and the person's reply
//! ([`ElicitationReply`]). A [`crate::PermissionPrompter`] renders it
//! ([`crate::PermissionPrompter::elicit`]); the runtime answers the agent
//! (docs/format.md § Elicitations).

use serde_json::{json, Map, Value};

use crate::core::elicitation_form;

/// What the agent asks, read from its request.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationQuestion {
    /// The agent's words (`message`).
    pub message: String,
    /// A form or a URL.
    pub ask: ElicitationAsk,
    /// The request's params as the agent sent them.
    pub params: Value,
}

/// The two modes of ACP elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationAsk {
    /// Fill in these fields.
    Form(ElicitationForm),
    /// Visit `url` (always `http` or `https`) and say when done.
    Url {
        /// The agent's id of this elicitation (`elicitation/complete` names it).
        elicitation_id: String,
        /// Where to go.
        url: String,
    },
}

/// A form: its schema's title and description and its fields, in the agent's order.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationForm {
    /// The schema's `title`.
    pub title: Option<String>,
    /// The schema's `description`.
    pub description: Option<String>,
    /// The fields.
    pub fields: Vec<FormField>,
    schema: Value,
}

/// One field of a form.
#[derive(Debug, Clone, PartialEq)]
pub struct FormField {
    /// The property name (the key of the answer).
    pub name: String,
    /// Its `title`.
    pub title: Option<String>,
    /// Its `description`.
    pub description: Option<String>,
    /// `string`, `number`, `integer`, `boolean` or `array` (a multi-select).
    pub kind: String,
    /// Whether the schema lists it as `required`.
    pub required: bool,
    /// Its `default`.
    pub default: Option<Value>,
    /// The allowed values (`enum`, or the `const`s of `oneOf` / `anyOf`; of `items` for a
    /// multi-select) with their titles; empty: any value of the type.
    pub choices: Vec<(String, Option<String>)>,
    spec: Value,
}

/// The person's reply.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationReply {
    /// Accepted: the form's content (empty for a URL).
    Accept(Map<String, Value>),
    /// Declined.
    Decline,
    /// Cancelled (dismissed without a choice).
    Cancel,
}

impl ElicitationReply {
    /// The ACP `elicitation/create` response.
    pub fn to_response(&self) -> Value {
        match self {
            ElicitationReply::Accept(c) => json!({"action": "accept", "content": c}),
            ElicitationReply::Decline => json!({"action": "decline"}),
            ElicitationReply::Cancel => json!({"action": "cancel"}),
        }
    }

    /// The reply a response describes (`None`: not an ACP elicitation response).
    pub fn from_response(v: &Value) -> Option<ElicitationReply> {
        match v.get("action")?.as_str()? {
            "accept" => Some(ElicitationReply::Accept(
                v.get("content")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            )),
            "decline" => Some(ElicitationReply::Decline),
            "cancel" => Some(ElicitationReply::Cancel),
            _ => None,
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl ElicitationQuestion {
    /// The question of an `elicitation/create` request, or why acpx cannot ask it (an
    /// unknown mode, a URL that is not `http`/`https`, a missing field).
    pub fn from_params(params: &Value) -> Result<ElicitationQuestion, String> {
        let message = text(params, "message").unwrap_or_default();
        let mode = params.get("mode").and_then(Value::as_str).unwrap_or("form");
        let ask = match mode {
            "form" => {
                let schema = params
                    .get("requestedSchema")
                    .cloned()
                    .unwrap_or(Value::Null);
                ElicitationAsk::Form(ElicitationForm::of(schema))
            }
            "url" => {
                let url = text(params, "url").ok_or("the URL elicitation has no `url`")?;
                check_url(&url)?;
                let elicitation_id = text(params, "elicitationId")
                    .ok_or("the URL elicitation has no `elicitationId`")?;
                ElicitationAsk::Url {
                    elicitation_id,
                    url,
                }
            }
            other => return Err(format!("acpx does not know the elicitation mode `{other}`")),
        };
        Ok(ElicitationQuestion {
            message,
            ask,
            params: params.clone(),
        })
    }
}

/// Only `http` and `https` URLs are shown to a person, whole and printable: no other scheme
/// (`file:`, `javascript:`, a custom handler) and no spaces or control characters that could
/// hide what the link is.
fn check_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = ["https://", "http://"]
        .iter()
        .find_map(|p| lower.strip_prefix(p));
    let scheme = url.split(':').next().unwrap_or("");
    match rest {
        None => Err(format!(
            "acpx takes only http and https URLs; this one's scheme is `{scheme}`"
        )),
        Some(r) if r.is_empty() || r.starts_with('/') => Err("the URL names no host".into()),
        Some(_) if url.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err("the URL holds spaces or control characters".into())
        }
        Some(_) => Ok(()),
    }
}

impl ElicitationForm {
    fn of(schema: Value) -> ElicitationForm {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields = schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, spec)| FormField::of(name, spec, required.contains(&name.as_str())))
            .collect();
        ElicitationForm {
            title: text(&schema, "title"),
            description: text(&schema, "description"),
            fields,
            schema,
        }
    }

    /// The content to send for these answers, checked as a whole (every field's answer or
    /// default, required fields present), or what is wrong.
    pub fn finish(&self, answers: &Map<String, Value>) -> Result<Map<String, Value>, String> {
        elicitation_form::fill(&self.schema, answers)
    }
}

impl FormField {
    fn of(name: &str, spec: &Value, required: bool) -> FormField {
        let kind = text(spec, "type").unwrap_or_else(|| "string".into());
        let source = if kind == "array" {
            spec.get("items").unwrap_or(&Value::Null)
        } else {
            spec
        };
        let titled: Vec<&Value> = ["oneOf", "anyOf"]
            .iter()
            .filter_map(|k| source.get(*k).and_then(Value::as_array))
            .flatten()
            .collect();
        let choices = elicitation_form::choices(source)
            .into_iter()
            .map(|c| {
                let title = titled
                    .iter()
                    .find(|o| o.get("const").and_then(Value::as_str) == Some(c))
                    .and_then(|o| text(o, "title"));
                (c.to_owned(), title)
            })
            .collect();
        FormField {
            name: name.to_owned(),
            title: text(spec, "title"),
            description: text(spec, "description"),
            kind,
            required,
            default: spec.get("default").cloned(),
            choices,
            spec: spec.clone(),
        }
    }

    /// The field's bounds in words (`0 to 120`, `at least 1 characters`…), if it has any.
    pub fn bounds(&self) -> Option<String> {
        let (lo, hi, unit) = match self.kind.as_str() {
            "string" => ("minLength", "maxLength", " characters"),
            "array" => ("minItems", "maxItems", " choices"),
            _ => ("minimum", "maximum", ""),
        };
        let n = |k: &str| {
            self.spec
                .get(k)
                .filter(|v| v.is_number())
                .map(Value::to_string)
        };
        match (n(lo), n(hi)) {
            (Some(a), Some(b)) => Some(format!("{a} to {b}{unit}")),
            (Some(a), None) => Some(format!("at least {a}{unit}")),
            (None, Some(b)) => Some(format!("at most {b}{unit}")),
            (None, None) => None,
        }
    }

    /// The value typed as `input`: `Ok(None)` leaves the field out (empty input on an
    /// optional field without a default), an empty input takes the default; a number picks
    /// that choice (1-based; comma-separated for a multi-select); `y`/`n` answer a boolean.
    /// `Err` says what is wrong, naming the field.
    pub fn answer(&self, input: &str) -> Result<Option<Value>, String> {
        let input = input.trim();
        if input.is_empty() {
            return match (&self.default, self.required) {
                (Some(d), _) => Ok(Some(d.clone())),
                (None, false) => Ok(None),
                (None, true) => Err(format!("field `{}` is required", self.name)),
            };
        }
        let value = match self.kind.as_str() {
            "number" => input
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(|n| json!(n))
                .ok_or_else(|| format!("field `{}`: `{input}` is not a number", self.name))?,
            "integer" => input
                .parse::<i64>()
                .map(|n| json!(n))
                .map_err(|_| format!("field `{}`: `{input}` is not a whole number", self.name))?,
            "boolean" => match input.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" => json!(true),
                "n" | "no" | "false" => json!(false),
                _ => return Err(format!("field `{}`: `{input}` is not yes or no", self.name)),
            },
            "array" => Value::Array(
                input
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| json!(self.choice(s)))
                    .collect(),
            ),
            _ => json!(self.choice(input)),
        };
        elicitation_form::check(&self.spec, &value)
            .map_err(|why| format!("field `{}`: {why}", self.name))?;
        Ok(Some(value))
    }

    /// The choice numbered `s` (1-based), else `s` itself.
    fn choice(&self, s: &str) -> String {
        s.parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.choices.get(i))
            .map_or_else(|| s.to_owned(), |c| c.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{ElicitationAsk, ElicitationQuestion};

    fn form(schema: Value) -> super::ElicitationForm {
        let q = ElicitationQuestion::from_params(
            &json!({"mode": "form", "message": "m", "requestedSchema": schema}),
        )
        .unwrap();
        match q.ask {
            ElicitationAsk::Form(f) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn typed_answers_are_parsed_and_checked() {
        let f = form(json!({"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "colour": {"type": "string", "oneOf": [
                {"const": "r", "title": "Red"}, {"const": "b", "title": "Blue"}], "default": "r"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}}
        }, "required": ["name", "age"]}));
        let names: Vec<&str> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["name", "age", "colour", "ok", "tags"],
            "agent's order"
        );
        let [name, age, colour, ok, tags] = &f.fields[..] else {
            panic!()
        };
        assert_eq!(name.answer("Ada"), Ok(Some(json!("Ada"))));
        assert_eq!(name.answer(""), Err("field `name` is required".into()));
        assert!(age
            .answer("old")
            .unwrap_err()
            .contains("not a whole number"));
        assert!(age
            .answer("130")
            .unwrap_err()
            .contains("above the maximum 120"));
        assert_eq!(age.answer(" 36 "), Ok(Some(json!(36))));
        assert_eq!(age.bounds().as_deref(), Some("0 to 120"));
        assert_eq!(colour.choices[1], ("b".into(), Some("Blue".into())));
        assert_eq!(colour.answer("2"), Ok(Some(json!("b"))));
        assert_eq!(colour.answer(""), Ok(Some(json!("r"))), "the default");
        assert!(colour
            .answer("green")
            .unwrap_err()
            .contains("not one of r, b"));
        assert_eq!(ok.answer(""), Ok(None), "optional: left out");
        assert_eq!(ok.answer("Y"), Ok(Some(json!(true))));
        assert_eq!(tags.answer("1, z"), Ok(Some(json!(["x", "z"]))));
        assert!(tags.answer("w").unwrap_err().contains("not one of"));
    }

    #[test]
    fn only_http_and_https_urls_are_taken() {
        let url = |u: &str| {
            ElicitationQuestion::from_params(
                &json!({"mode": "url", "message": "m", "url": u, "elicitationId": "e"}),
            )
        };
        assert!(url("https://example.com/a?b=c").is_ok());
        assert!(url("HTTP://example.com").is_ok());
        for (bad, says) in [
            ("file:///etc/passwd", "scheme is `file`"),
            ("javascript:alert(1)", "scheme is `javascript`"),
            ("https://", "no host"),
            ("https://a.com/x y", "spaces"),
        ] {
            let e = url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = ElicitationQuestion::from_params(&json!({"mode": "telepathy", "message": "m"}));
        assert!(e.unwrap_err().contains("`telepathy`"));
    }
}
