/**
 * The JSON Schema subset the HTTP routes are written in, and its validator.
 *
 * Why not Fastify's default (Ajv)? Three reasons. Ajv's Fastify defaults coerce body types
 * (`"5"` becomes 5, `123` becomes `"123"`) and silently drop unknown properties; a job API should
 * refuse both. The plugin runs inside the user's Fastify instance, so it cannot change that
 * instance's Ajv options, only install its own compiler in its own encapsulated scope. And Ajv
 * is not a dependency Conveyor can rely on being resolvable (it is Fastify's, not ours). The
 * subset below is small, standard JSON Schema (draft 2020-12 compatible), so the very same
 * objects are published in the OpenAPI document.
 *
 * Querystring and path parameters arrive as strings: for those parts only, a string is converted
 * when the schema asks for an integer, a number or a boolean.
 */

export type SchemaType = "string" | "integer" | "number" | "boolean" | "object" | "array" | "null";

/** A JSON Schema restricted to the keywords {@link validate} implements. */
export interface JsonSchema {
  type?: SchemaType | readonly SchemaType[];
  title?: string;
  description?: string;
  examples?: readonly unknown[];
  default?: unknown;
  /** `uri` (absolute http or https URL) and `date-time` (RFC 3339) are checked; others are documentation. */
  format?: string;
  enum?: readonly unknown[];
  const?: unknown;
  properties?: { readonly [name: string]: JsonSchema };
  required?: readonly string[];
  additionalProperties?: boolean | JsonSchema;
  minProperties?: number;
  maxProperties?: number;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  anyOf?: readonly JsonSchema[];
  /** OpenAPI-only annotations may ride along; the validator ignores unknown keywords. */
  readOnly?: boolean;
  deprecated?: boolean;
}

/** Where a value came from, as in OpenAPI's `in`. */
export type RequestPart = "body" | "querystring" | "params" | "headers";

/** One reason a value does not match its schema. `pointer` is a JSON Pointer into that part. */
export interface SchemaIssue {
  in: RequestPart;
  pointer: string;
  detail: string;
}

/** A request part failed its route schema: answered as 400 with every issue. */
export class RequestValidationError extends Error {
  override name = "RequestValidationError";
  readonly statusCode = 400;
  constructor(readonly issues: readonly SchemaIssue[]) {
    super(`the request does not match the API schema: ${issues.map((i) => `${i.in} ${i.pointer || "/"}: ${i.detail}`).join("; ")}`);
  }
}

const MAX_ISSUES = 20;
/** Issues about a value's shape (type, const, enum) rather than its content; `anyOf` uses them. */
const shapeIssues = new WeakSet<SchemaIssue>();
const patternCache = new Map<string, RegExp>();

function typeOf(value: unknown): SchemaType | "undefined" | "other" {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  switch (typeof value) {
    case "string":
      return "string";
    case "boolean":
      return "boolean";
    case "number":
      return Number.isInteger(value) ? "integer" : "number";
    case "object":
      return "object";
    case "undefined":
      return "undefined";
    default:
      return "other";
  }
}

function matchesType(actual: ReturnType<typeof typeOf>, wanted: SchemaType): boolean {
  return actual === wanted || (wanted === "number" && actual === "integer");
}

function escapePointer(segment: string | number): string {
  return String(segment).replace(/~/g, "~0").replace(/\//g, "~1");
}

function describe(value: unknown): string {
  const t = typeOf(value);
  if (t === "string") {
    const s = value as string;
    return s.length > 40 ? `a string of ${s.length} characters` : JSON.stringify(s);
  }
  if (t === "integer" || t === "number" || t === "boolean" || t === "null") return String(value);
  return t === "other" || t === "undefined" ? "nothing" : `an ${t === "array" ? "array" : "object"}`;
}

function isDateTime(s: string): boolean {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/i.test(s) && !Number.isNaN(Date.parse(s));
}

function isHttpUri(s: string): boolean {
  try {
    const u = new URL(s);
    return u.protocol === "http:" || u.protocol === "https:";
  } catch {
    return false;
  }
}

/**
 * Validates `value` against `schema`; returns the issues (empty when valid), at most 20.
 * `coerce` converts strings for integer, number and boolean schemas (query and path parameters).
 * With `coerce`, the returned `value` holds the converted data.
 */
export function validate(schema: JsonSchema, value: unknown, part: RequestPart, coerce = false): { issues: SchemaIssue[]; value: unknown } {
  const issues: SchemaIssue[] = [];
  const out = check(schema, value, "", part, coerce, issues);
  return { issues, value: out };
}

function check(schema: JsonSchema, value: unknown, pointer: string, part: RequestPart, coerce: boolean, issues: SchemaIssue[]): unknown {
  if (issues.length >= MAX_ISSUES) return value;
  const fail = (detail: string, shape = false) => {
    const issue: SchemaIssue = { in: part, pointer, detail };
    if (shape) shapeIssues.add(issue);
    issues.push(issue);
  };

  if (schema.anyOf) {
    let best: SchemaIssue[] | null = null;
    for (const option of schema.anyOf) {
      const trial: SchemaIssue[] = [];
      const converted = check(option, value, pointer, part, coerce, trial);
      if (trial.length === 0) return converted;
      // The alternative whose type fits (it failed on content, not on shape) explains best.
      const fits = !trial.some((i) => shapeIssues.has(i));
      if (fits && (best === null || trial.length < best.length)) best = trial;
    }
    if (best) issues.push(...best.slice(0, MAX_ISSUES - issues.length));
    else fail(`must be one of: ${schema.anyOf.map(summarize).join(", ")}; got ${describe(value)}`, true);
    return value;
  }

  let v = value;
  const types = schema.type === undefined ? null : typeof schema.type === "string" ? [schema.type] : schema.type;
  if (coerce && typeof v === "string" && types) {
    if (types.includes("integer") || types.includes("number")) {
      const n = v.trim() === "" ? Number.NaN : Number(v);
      if (Number.isFinite(n) && (types.includes("number") || Number.isInteger(n))) v = n;
    } else if (types.includes("boolean") && (v === "true" || v === "false")) {
      v = v === "true";
    }
  }
  const actual = typeOf(v);
  if (types && !types.some((t) => matchesType(actual, t))) {
    fail(
      `must be ${types.map((t) => (t === "integer" ? "an integer" : t === "array" || t === "object" ? `an ${t}` : `a ${t}`)).join(" or ")}; got ${describe(v)}`,
      true,
    );
    return v;
  }
  if (schema.const !== undefined && v !== schema.const) {
    fail(`must be ${JSON.stringify(schema.const)}; got ${describe(v)}`, true);
    return v;
  }
  if (schema.enum && !schema.enum.includes(v)) {
    fail(`must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}; got ${describe(v)}`, true);
    return v;
  }

  if (typeof v === "string") {
    const length = [...v].length;
    if (schema.minLength !== undefined && length < schema.minLength) fail(`must have at least ${schema.minLength} characters`);
    if (schema.maxLength !== undefined && length > schema.maxLength) fail(`must have at most ${schema.maxLength} characters; got ${length}`);
    if (schema.pattern !== undefined) {
      let re = patternCache.get(schema.pattern);
      if (!re) {
        re = new RegExp(schema.pattern, "u");
        patternCache.set(schema.pattern, re);
      }
      if (!re.test(v)) fail(`must match ${schema.pattern}; got ${describe(v)}`);
    }
    if (schema.format === "date-time" && !isDateTime(v)) fail(`must be an RFC 3339 date-time such as 2030-01-01T12:00:00Z; got ${describe(v)}`);
    if (schema.format === "uri" && !isHttpUri(v)) fail(`must be an absolute http or https URL; got ${describe(v)}`);
  } else if (typeof v === "number") {
    if (schema.minimum !== undefined && v < schema.minimum) fail(`must be >= ${schema.minimum}; got ${v}`);
    if (schema.maximum !== undefined && v > schema.maximum) fail(`must be <= ${schema.maximum}; got ${v}`);
  } else if (Array.isArray(v)) {
    if (schema.minItems !== undefined && v.length < schema.minItems) fail(`must have at least ${schema.minItems} item(s)`);
    if (schema.maxItems !== undefined && v.length > schema.maxItems) fail(`must have at most ${schema.maxItems} items; got ${v.length}`);
    if (schema.items && issues.length === 0) {
      const items = schema.items;
      const converted = v.map((item: unknown, i) => check(items, item, `${pointer}/${i}`, part, coerce, issues));
      if (coerce) v = converted;
    }
  } else if (actual === "object") {
    const obj = v as Record<string, unknown>;
    const keys = Object.keys(obj);
    if (schema.minProperties !== undefined && keys.length < schema.minProperties) fail(`must have at least ${schema.minProperties} properties`);
    if (schema.maxProperties !== undefined && keys.length > schema.maxProperties) fail(`must have at most ${schema.maxProperties} properties`);
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(obj, name) || obj[name] === undefined) {
        issues.push({ in: part, pointer: `${pointer}/${escapePointer(name)}`, detail: "is required" });
      }
    }
    const props = schema.properties ?? {};
    let copy: Record<string, unknown> | null = null;
    for (const key of keys) {
      if (issues.length >= MAX_ISSUES) break;
      const childPointer = `${pointer}/${escapePointer(key)}`;
      const sub = Object.hasOwn(props, key) ? props[key] : undefined;
      let converted: unknown;
      if (sub) converted = check(sub, obj[key], childPointer, part, coerce, issues);
      else if (schema.additionalProperties === false) {
        const known = Object.keys(props);
        issues.push({
          in: part,
          pointer: childPointer,
          detail: `is not a known property${known.length ? `; known: ${known.join(", ")}` : ""}`,
        });
        continue;
      } else if (typeof schema.additionalProperties === "object") {
        converted = check(schema.additionalProperties, obj[key], childPointer, part, coerce, issues);
      } else continue;
      if (coerce && converted !== obj[key]) {
        copy ??= { ...obj };
        copy[key] = converted;
      }
    }
    if (copy) v = copy;
  }
  return v;
}

function summarize(schema: JsonSchema): string {
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  // An object told apart by a constant property (a tagged union): name the tag.
  const tag = Object.entries(schema.properties ?? {}).find(([, s]) => s.const !== undefined);
  if (tag) return `{ "${tag[0]}": ${JSON.stringify(tag[1].const)}, … }`;
  if (schema.type) return typeof schema.type === "string" ? schema.type : schema.type.join("|");
  if (schema.properties) return `{ ${Object.keys(schema.properties).join(", ")} }`;
  return "a value";
}

/**
 * Fastify validator compiler for this subset: installed in the plugin's own scope, so the user's
 * other routes keep whatever validation they had.
 */
export function compileValidator({ schema, httpPart }: { schema: unknown; httpPart?: string }) {
  const part: RequestPart = httpPart === "querystring" || httpPart === "params" || httpPart === "headers" ? httpPart : "body";
  const coerce = part === "querystring" || part === "params";
  const s = schema as JsonSchema;
  return (data: unknown): { value: unknown } | { error: RequestValidationError } => {
    const { issues, value } = validate(s, data, part, coerce);
    return issues.length > 0 ? { error: new RequestValidationError(issues) } : { value };
  };
}
