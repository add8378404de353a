import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { NodeLabelSchema } from "../../proto/gen/common/common_pb.ts";
import { InvalidArgumentError } from "../rpc/mod.ts";
import { MAX_LABELS_PER_NODE, applyLabelChanges, checkLabelChanges, labelKeyProblem, labelValueProblem } from "./labels.ts";

const label = (key: string, value = "") => create(NodeLabelSchema, { key, value });

describe("label syntax (Kubernetes')", () => {
  test("keys that are labels", () => {
    for (const key of ["zone", "a", "Zone_1.b-c", "example.com/rack", "nodecore.dev/role-hint", `${"a".repeat(63)}`, `${"b".repeat(253)}/x`]) {
      expect(labelKeyProblem(key)).toBeUndefined();
    }
  });

  test("keys that are not, each with why", () => {
    expect(labelKeyProblem("")).toBe("is empty");
    expect(labelKeyProblem("/x")).toContain("the prefix before '/' is empty");
    expect(labelKeyProblem("example.com/")).toContain("the name is empty");
    expect(labelKeyProblem("Example.com/x")).toContain("not a DNS subdomain");
    expect(labelKeyProblem("a/b/c")).toContain("the name must be");
    expect(labelKeyProblem("-zone")).toContain("a letter or digit at both ends");
    expect(labelKeyProblem("zone ")).toContain("a letter or digit at both ends");
    expect(labelKeyProblem("a".repeat(64))).toContain("64 characters, more than 63");
    expect(labelKeyProblem(`${"b".repeat(254)}/x`)).toContain("254 characters, more than 253");
    // A bidirectional override in a key never reaches the owner's terminal as such.
    expect(labelKeyProblem("zo\u202ene")).toBe("'zo\\u{202e}ne': the name must be letters, digits, '-', '_' or '.', with a letter or digit at both ends");
  });

  test("values: empty, or name-like up to 63 characters", () => {
    expect(labelValueProblem("")).toBeUndefined();
    expect(labelValueProblem("rack-7.b_2")).toBeUndefined();
    expect(labelValueProblem("a b")).toContain("letters, digits");
    expect(labelValueProblem("x".repeat(64))).toContain("64 characters");
  });
});

describe("label changes", () => {
  test("upserts add or replace, deletions remove (missing keys too), and the result is sorted", () => {
    const after = applyLabelChanges([label("zone", "a"), label("rack", "1")], [label("zone", "b"), label("disk", "ssd")], ["rack", "absent"]);
    expect(after.map((l) => [l.key, l.value])).toEqual([
      ["disk", "ssd"],
      ["zone", "b"],
    ]);
  });

  test("a request is refused naming the field: empty, duplicate, both upserted and deleted, bad syntax", () => {
    const refusal = (f: () => void) => {
      try {
        f();
      } catch (err) {
        expect(err).toBeInstanceOf(InvalidArgumentError);
        return (err as Error).message;
      }
      throw new Error("accepted");
    };
    expect(refusal(() => checkLabelChanges([], []))).toContain("nothing to change");
    expect(refusal(() => checkLabelChanges([label("a"), label("a")], []))).toBe("upsert[1].key: 'a' is given twice");
    expect(refusal(() => checkLabelChanges([label("a")], ["a"]))).toBe("delete[0]: 'a' is both upserted and deleted");
    expect(refusal(() => checkLabelChanges([label("a", "b c")], []))).toContain("upsert[0].value:");
    expect(refusal(() => checkLabelChanges([], ["-x"]))).toContain("delete[0]:");
  });

  test("a node carries a bounded number of labels", () => {
    const many = Array.from({ length: MAX_LABELS_PER_NODE }, (_, i) => label(`k${i}`));
    expect(applyLabelChanges(many, [], []).length).toBe(MAX_LABELS_PER_NODE);
    expect(() => applyLabelChanges(many, [label("one-more")], [])).toThrow(`more than ${MAX_LABELS_PER_NODE}`);
  });
});
