//! A component of another world: exports `hello`, not `describe`/`run`.
wit_bindgen::generate!({
    inline: "package test:other; world other { export hello: func() -> string; }",
});

struct Other;

impl Guest for Other {
    fn hello() -> String {
        "hello".to_string()
    }
}

export!(Other);
