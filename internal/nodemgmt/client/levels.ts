// Log levels between the node (internal/log's names) and the wire
// (LogLevel): one table, for the service and for ctl.

import { LogLevel } from "../../../proto/gen/api/node_management_pb.ts";
import type { Level } from "../../log/mod.ts";

/** internal/log's level → the wire's. */
export const WIRE_LEVELS: Readonly<Record<Level, LogLevel>> = { debug: LogLevel.DEBUG, info: LogLevel.INFO, warn: LogLevel.WARN, error: LogLevel.ERROR };

const NAMES = new Map<LogLevel, Level>(Object.entries(WIRE_LEVELS).map(([name, level]) => [level, name as Level]));

/** The wire's level → internal/log's; undefined for UNSPECIFIED and for values this build does not know. */
export function levelOfWire(level: LogLevel): Level | undefined {
  return NAMES.get(level);
}
