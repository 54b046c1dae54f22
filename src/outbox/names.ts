/** Names the outbox derives from a backend's schema or table prefix, checked once. */
import { InvalidInputError } from "../core/errors.js";
import { shown } from "../core/checks.js";

const SCHEMA_PATTERN = /^[a-z_][a-z0-9_]{0,49}$/;
const PREFIX_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function checkSchema(schema: string): string {
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema)) {
    throw new InvalidInputError(`schema must be lower-case letters, digits and _, not starting with a digit, at most 50 characters; got ${shown(schema)}`);
  }
  return schema;
}

export function checkPrefix(prefix: string): string {
  if (typeof prefix !== "string" || !PREFIX_PATTERN.test(prefix)) {
    throw new InvalidInputError(`tablePrefix must be letters, digits and _ and not start with a digit; got ${shown(prefix)}`);
  }
  return prefix;
}

/** A checked schema name, quoted. */
export function quoteIdent(name: string): string {
  return `"${name}"`;
}

/** The NOTIFY channel publish() signals and polling relays LISTEN on. */
export function outboxChannel(schema: string): string {
  return `${schema}_outbox`;
}
