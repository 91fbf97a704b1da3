//! XML: the one escape the OVF writer and the vSphere SOAP client use, and
//! the element lookups (by local name, namespaces ignored) of the SOAP and
//! EC2 Query clients.

/// `s` with the five XML special characters escaped (valid in element
/// text and in double- or single-quoted attributes).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// The first descendant element named `name` (local name).
pub fn find<'a, 'i>(n: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    n.descendants()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

/// The direct children named `name`.
pub fn children<'a, 'i>(
    n: roxmltree::Node<'a, 'i>,
    name: &'a str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> + 'a {
    n.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == name)
}

/// The text of the first child named `name`.
pub fn child_text(n: roxmltree::Node<'_, '_>, name: &str) -> Option<String> {
    children(n, name)
        .next()
        .map(|c| c.text().unwrap_or("").to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_the_five() {
        assert_eq!(super::esc(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(super::esc("plain"), "plain");
    }
}
