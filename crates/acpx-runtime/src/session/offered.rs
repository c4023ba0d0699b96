//! What a session offers to `set` and `set model` (issue 51: one exit code per kind of
//! mistake): a config option, a value or a model the session does not offer is refused as a
//! usage error naming the ones it does, whether acpx knows them from the session's advertised
//! options (nothing is sent then) or the agent refuses the request as invalid params.

use serde_json::Value;

use crate::error::{RuntimeError, RuntimeResult};

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The ids of the config options the session advertises.
pub(super) fn option_ids(options: &[Value]) -> Vec<String> {
    options
        .iter()
        .filter_map(|o| str_of(o, "id").map(str::to_owned))
        .collect()
}

/// The values a select option offers (its `options`, groups flattened); `None` when it lists
/// none (a boolean, or an agent that does not say).
pub(super) fn option_values(option: &Value) -> Option<Vec<String>> {
    let list = option.get("options")?.as_array()?;
    let mut values = Vec::new();
    for item in list {
        match item.get("options").and_then(Value::as_array) {
            // A group: `{group, name, options: [...]}`.
            Some(inner) => values.extend(
                inner
                    .iter()
                    .filter_map(|v| str_of(v, "value").map(str::to_owned)),
            ),
            None => values.extend(str_of(item, "value").map(str::to_owned)),
        }
    }
    (!values.is_empty()).then_some(values)
}

/// Refuses, before anything is sent, a config option the session does not advertise, or a
/// value its select option does not list. Nothing is checked when the session advertises no
/// options at all (the agent answers).
pub(super) fn check_config(options: &[Value], id: &str, value: &Value) -> RuntimeResult<()> {
    if options.is_empty() {
        return Ok(());
    }
    let Some(option) = options.iter().find(|o| str_of(o, "id") == Some(id)) else {
        return Err(not_offered("config option", id, option_ids(options)));
    };
    if let (Some(values), Some(asked)) = (option_values(option), value.as_str()) {
        if !values.iter().any(|v| v == asked) {
            return Err(not_offered(
                &format!("value of config option {id}"),
                asked,
                values,
            ));
        }
    }
    Ok(())
}

/// The models the session offers: the values of its model config option, else the
/// `availableModels` of the unstable `models`; `None` when it does not say.
pub(super) fn model_ids(
    options: &[Value],
    model_option: Option<&str>,
    models: Option<&Value>,
) -> Option<Vec<String>> {
    if let Some(id) = model_option {
        let option = options.iter().find(|o| str_of(o, "id") == Some(id))?;
        return option_values(option);
    }
    let list = models?.get("availableModels")?.as_array()?;
    let ids: Vec<String> = list
        .iter()
        .filter_map(|m| str_of(m, "modelId").map(str::to_owned))
        .collect();
    (!ids.is_empty()).then_some(ids)
}

pub(super) fn not_offered(what: &str, asked: &str, available: Vec<String>) -> RuntimeError {
    RuntimeError::NotOffered {
        what: what.to_owned(),
        asked: asked.to_owned(),
        available,
        detail: None,
        acp: None,
    }
}

/// The agent's refusal of what it was asked to set, as invalid params (-32602): the same
/// usage error, keeping the agent's own message and error; any other error unchanged.
pub(super) fn refused(
    e: RuntimeError,
    what: &str,
    asked: &str,
    available: Vec<String>,
) -> RuntimeError {
    match e {
        RuntimeError::Agent { error, .. } if error.code == -32602 => RuntimeError::NotOffered {
            what: what.to_owned(),
            asked: asked.to_owned(),
            available,
            detail: Some(error.message.clone()),
            acp: Some(error),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_values_and_refusals() {
        let options = vec![
            json!({"id": "model", "type": "select", "currentValue": "small",
            "options": [{"value": "small", "name": "S"}, {"group": "g", "name": "G",
                "options": [{"value": "large", "name": "L"}]}]}),
        ];
        assert!(check_config(&options, "model", &json!("large")).is_ok());
        let e = check_config(&options, "model", &json!("huge")).unwrap_err();
        assert!(e.to_string().contains("small, large"), "{e}");
        let e = check_config(&options, "foo", &json!("bar")).unwrap_err();
        assert!(e.to_string().contains("config option \"foo\""), "{e}");
        assert!(check_config(&[], "foo", &json!("bar")).is_ok());
        assert_eq!(
            model_ids(&options, Some("model"), None),
            Some(vec!["small".to_owned(), "large".to_owned()])
        );
        let models = json!({"availableModels": [{"modelId": "a"}, {"modelId": "b"}]});
        assert_eq!(
            model_ids(&[], None, Some(&models)),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
    }
}
