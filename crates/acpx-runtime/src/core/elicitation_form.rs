//! Answers to a form elicitation checked against its `requestedSchema`: each answer has the
//! field's type (`string`, `number`, `integer`, `boolean`, or an array of strings for a
//! multi-select), is one of its `enum` / `oneOf` choices and within its bounds; a field not
//! answered takes its `default`, and a required field with neither is an error. Answers for
//! fields the form does not have are ignored (one answers file may serve several forms).

use serde_json::{Map, Value};

/// The form's content from `answers`, or what is wrong with them (one sentence).
pub(crate) fn fill(
    schema: &Value,
    answers: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, field) in properties {
        let value = match answers.get(name).or_else(|| field.get("default")) {
            Some(v) => v,
            None if required.contains(&name.as_str()) => {
                return Err(format!("the required field `{name}` has no answer"));
            }
            None => continue,
        };
        check(field, value).map_err(|why| format!("field `{name}`: {why}"))?;
        content.insert(name.clone(), value.clone());
    }
    Ok(content)
}

/// Whether `value` fits the property `field`.
pub(crate) fn check(field: &Value, value: &Value) -> Result<(), String> {
    let kind = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    match kind {
        "string" => {
            let s = value
                .as_str()
                .ok_or_else(|| format!("expected a string, got {value}"))?;
            let choices = choices(field);
            if !choices.is_empty() && !choices.contains(&s) {
                return Err(format!("`{s}` is not one of {}", choices.join(", ")));
            }
            let len = s.chars().count() as f64;
            bounds(field, len, "minLength", "maxLength", "characters")
        }
        "number" => {
            let n = value
                .as_f64()
                .ok_or_else(|| format!("expected a number, got {value}"))?;
            bounds(field, n, "minimum", "maximum", "")
        }
        "integer" => {
            let n = value
                .as_i64()
                .ok_or_else(|| format!("expected an integer, got {value}"))?;
            bounds(field, n as f64, "minimum", "maximum", "")
        }
        "boolean" => value
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| format!("expected true or false, got {value}")),
        "array" => {
            let items = value
                .as_array()
                .ok_or_else(|| format!("expected an array of strings, got {value}"))?;
            let allowed = field.get("items").map(choices).unwrap_or_default();
            for item in items {
                let s = item
                    .as_str()
                    .ok_or_else(|| format!("expected an array of strings, got {value}"))?;
                if !allowed.is_empty() && !allowed.contains(&s) {
                    return Err(format!("`{s}` is not one of {}", allowed.join(", ")));
                }
            }
            bounds(field, items.len() as f64, "minItems", "maxItems", "choices")
        }
        other => Err(format!("the form asks for an unknown type `{other}`")),
    }
}

/// The allowed values of a string (or of a multi-select's items): `enum`, or the `const`s of
/// `oneOf` / `anyOf`. Empty: any string.
pub(crate) fn choices(field: &Value) -> Vec<&str> {
    if let Some(e) = field.get("enum").and_then(Value::as_array) {
        return e.iter().filter_map(Value::as_str).collect();
    }
    ["oneOf", "anyOf"]
        .iter()
        .filter_map(|k| field.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(|o| o.get("const").and_then(Value::as_str))
        .collect()
}

/// `n` within the field's `min` and `max` keywords, when it has them.
fn bounds(field: &Value, n: f64, min: &str, max: &str, unit: &str) -> Result<(), String> {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    if let Some(lo) = field.get(min).and_then(Value::as_f64).filter(|lo| n < *lo) {
        return Err(format!("{n}{unit} is below the minimum {lo}"));
    }
    if let Some(hi) = field.get(max).and_then(Value::as_f64).filter(|hi| n > *hi) {
        return Err(format!("{n}{unit} is above the maximum {hi}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::fill;

    fn form() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "age": {"type": "integer", "minimum": 0},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "ok": {"type": "boolean"}
            },
            "required": ["name"]
        })
    }

    fn answers(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn answers_fill_the_form_and_defaults_the_rest() {
        let got = fill(
            &form(),
            &answers(json!({"name": "Ada", "age": 36, "other": 1})),
        )
        .unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"name": "Ada", "age": 36, "color": "red"})
        );
    }

    #[test]
    fn wrong_answers_are_named() {
        let err = |a: Value| fill(&form(), &answers(a)).unwrap_err();
        assert_eq!(err(json!({})), "the required field `name` has no answer");
        assert!(err(json!({"name": "A", "age": 1.5})).contains("field `age`: expected an integer"));
        assert!(err(json!({"name": "A", "age": -1})).contains("below the minimum 0"));
        assert!(err(json!({"name": "A", "color": "green"})).contains("not one of red, blue"));
        assert!(err(json!({"name": "A", "ok": "yes"})).contains("expected true or false"));
        assert!(err(json!({"name": ""})).contains("below the minimum 1"));
    }
}
