// Reading JUnit reports, as bun's (test/unit.ts) and ginkgo's
// (test/conformance/summary.ts) reporters write them: their test cases,
// and the XML entities and attributes inside them.

export function unescapeXml(text: string): string {
  const named: Record<string, string> = { lt: "<", gt: ">", quot: '"', apos: "'", amp: "&" };
  return text.replace(
    /&(lt|gt|quot|apos|amp|#\d+|#x[0-9a-fA-F]+);/g,
    (_, entity: string) => named[entity] ?? String.fromCodePoint(entity.startsWith("#x") ? parseInt(entity.slice(2), 16) : parseInt(entity.slice(1), 10)),
  );
}

/** An attribute of a tag's text, unescaped; undefined when the tag has none. */
export function attribute(tag: string, name: string): string | undefined {
  const match = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return match ? unescapeXml(match[1]!) : undefined;
}

/** Each <testcase>: its opening tag's attributes and its body ("" when self-closing). */
export function testCases(xml: string): { tag: string; body: string }[] {
  return [...xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)].map((m) => ({ tag: m[1]!, body: m[2] ?? "" }));
}

/** A test case's <failure> or <error>: its tag's attributes and its text, unescaped; undefined when it passed. */
export function failureOf(body: string): { tag: string; text: string } | undefined {
  const match = /<(?:failure|error)\b([^>]*?)(?:\/>|>([\s\S]*?)<\/(?:failure|error)>)/.exec(body);
  return match ? { tag: match[1]!, text: unescapeXml(match[2] ?? "").trim() } : undefined;
}
