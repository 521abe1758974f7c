//! A data model update applied to a model as a renderer applies it.

use serde_json::Value;

use super::UpdateDataModel;

impl UpdateDataModel {
    /// What a renderer does with this message: writes the value at the pointer in `model`
    /// (the whole model for no pointer or `/`; a new key, or an index equal to an array's
    /// length, appends), or removes what is there when the value is `null`. Returns whether
    /// the pointer's parent exists and can hold the value; when it does not, `model` is left
    /// as it was.
    pub fn apply_to(self, model: &mut Value) -> bool {
        let value = self.value;
        let path = self.path.as_deref().unwrap_or("/");
        if path == "/" || path.is_empty() {
            *model = value;
            return true;
        }
        let Some((parent, last)) = path.rsplit_once('/') else {
            return false;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        match model.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                if value.is_null() {
                    map.remove(&last);
                } else {
                    map.insert(last, value);
                }
                true
            }
            Some(Value::Array(items)) => {
                let Ok(index) = last.parse::<usize>() else {
                    return false;
                };
                if value.is_null() {
                    if index < items.len() {
                        items.remove(index);
                    }
                } else if index == items.len() {
                    items.push(value);
                } else if let Some(item) = items.get_mut(index) {
                    *item = value;
                } else {
                    return false;
                }
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn update(path: Option<&str>, value: Value) -> UpdateDataModel {
        UpdateDataModel {
            surface_id: "s".to_owned(),
            path: path.map(str::to_owned),
            value,
        }
    }

    #[test]
    fn apply_to_writes_removes_and_appends_as_a_renderer_does() {
        let mut model = json!({});
        assert!(update(None, json!({"a": {"b": 1}, "list": [1]})).apply_to(&mut model));
        assert!(update(Some("/a/c~1d"), json!(2)).apply_to(&mut model));
        assert!(update(Some("/a/b"), Value::Null).apply_to(&mut model));
        assert!(update(Some("/list/1"), json!(2)).apply_to(&mut model));
        assert!(update(Some("/list/0"), json!(0)).apply_to(&mut model));
        assert_eq!(model, json!({"a": {"c/d": 2}, "list": [0, 2]}));
        assert!(update(Some("/list/0"), Value::Null).apply_to(&mut model));
        assert!(update(Some("/"), json!({"x": 1})).apply_to(&mut model));
        assert_eq!(model, json!({"x": 1}));
    }

    #[test]
    fn apply_to_leaves_the_model_alone_where_the_pointer_cannot_go() {
        let mut model = json!({"list": [1], "text": "t"});
        let before = model.clone();
        for path in [
            "/missing/key",
            "/list/5",
            "/list/x",
            "/text/key",
            "no-slash",
        ] {
            assert!(!update(Some(path), json!(1)).apply_to(&mut model), "{path}");
        }
        assert_eq!(model, before);
    }
}
