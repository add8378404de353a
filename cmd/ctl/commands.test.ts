// ctl's table as a whole: what help says of a flag's default is what its
// handler gets, and arguments are laid out as the handlers' types assume.

import { describe, expect, test } from "bun:test";
import type { ArgSpec, FlagSpec } from "../../internal/operator/mod.ts";
import { program } from "./commands.ts";

/** Every runnable entry of the table, by its words. */
const entries = program.commands.flatMap((c) => (c.actions ? c.actions.map((a) => ({ words: `${c.name} ${a.name}`, spec: a })) : [{ words: c.name, spec: c }]));
const flags: { words: string; flag: FlagSpec }[] = [
  ...program.flags.map((flag) => ({ words: "(every command)", flag })),
  ...entries.flatMap(({ words, spec }) => (spec.flags ?? []).map((flag) => ({ words, flag }))),
];

describe("ctl's table", () => {
  test("a default read back through its flag's parser is itself: the help shows the value the handler gets", () => {
    const withDefault = flags.filter(({ flag }) => flag.default !== undefined);
    expect(withDefault.length).toBeGreaterThan(5);
    for (const { words, flag } of withDefault) {
      expect({ words, flag: flag.name, value: flag.parse ? flag.parse(String(flag.default)) : String(flag.default) }).toEqual({ words, flag: flag.name, value: flag.default });
    }
  });

  test("a flag has a default or a shown default, not both; a switch has neither", () => {
    for (const { words, flag } of flags) {
      const kinds = [flag.default !== undefined && "default", flag.shownDefault !== undefined && "shownDefault"].filter(Boolean);
      expect({ words, flag: flag.name, kinds: kinds.length <= (flag.value ? 1 : 0) }).toEqual({ words, flag: flag.name, kinds: true });
    }
  });

  test("a variadic or optional argument comes after every required one, and a variadic one last", () => {
    for (const { words, spec } of entries) {
      const args: readonly ArgSpec[] = spec.args ?? [];
      const firstOptional = args.findIndex((a) => a.optional || a.variadic);
      const laidOut = args.every((a, i) => (a.variadic ? i === args.length - 1 : true) && (firstOptional < 0 || i < firstOptional || a.optional || a.variadic));
      expect({ words, laidOut }).toEqual({ words, laidOut: true });
    }
  });
});
