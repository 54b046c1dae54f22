/**
 * Request validation for the HTTP routes: Ajv (JSON Schema draft-07, the dialect the OpenAPI
 * document publishes) checks every route's params, querystring, headers and body against the
 * same schema objects the document publishes (TypeBox definitions, typed-schema.ts).
 *
 * Ajv is configured as a job API needs it, not as Fastify's defaults have it: no type coercion
 * (a body's `"5"` never becomes 5), no stripping of unknown properties (they are refused where a
 * schema says `additionalProperties: false`), no defaults written into the request (handlers
 * apply the documented defaults), every issue reported (up to 20). The plugin installs this
 * compiler in its own encapsulated scope only, so an app that mounts the API keeps its own
 * validation for its other routes.
 *
 * Querystring and path parameters arrive as strings, since that is all a URL carries: for those
 * two parts only, a top-level string is parsed when its schema asks for an integer, a number or
 * a boolean (`"5"` → 5, `"true"` → true; `"5.5"` for an integer stays a string and is refused),
 * before Ajv checks the result. That is reading the URL's format, not coercion: bodies and
 * headers are checked as sent.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import formatsPlugin from "ajv-formats";

export type SchemaType = "string" | "integer" | "number" | "boolean" | "object" | "array" | "null";

/**
 * The JSON Schema keywords the API's schemas use (standard JSON Schema, as Ajv and the OpenAPI
 * document read them). TypeBox schemas (typed-schema.ts) are assignable to it.
 */
export interface JsonSchema {
  type?: SchemaType | readonly SchemaType[];
  title?: string;
  description?: string;
  examples?: readonly unknown[];
  default?: unknown;
  /** `date-time` (RFC 3339, with a time zone) and `uri` (RFC 3986, absolute) are checked; Ajv refuses any other at compile time. */
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
  /** Annotations only. */
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

/** Issues reported at most, per request part. */
const MAX_ISSUES = 20;

// ajv-formats is CommonJS whose module.exports is the plugin; its typings describe `default`.
const addFormats = ((formatsPlugin as unknown as { default?: unknown }).default ?? formatsPlugin) as typeof formatsPlugin.default;

const ajv = new Ajv({
  allErrors: true,
  verbose: true,
  coerceTypes: false,
  removeAdditional: false,
  useDefaults: false,
  // `type: ["string", "null"]` is how the API has always published a nullable value.
  allowUnionTypes: true,
  // strictSchema stays on (an unknown keyword or format is a bug, refused when routes register);
  // strictTypes would log about `properties` beside a schema with no `type` (the "any JSON
  // value with these known fields" shapes), which are intended.
  strictTypes: false,
});
addFormats(ajv, ["date-time", "uri"]);

const compiled = new WeakMap<object, ValidateFunction>();

function compile(schema: JsonSchema): ValidateFunction {
  let fn = compiled.get(schema);
  if (!fn) {
    fn = ajv.compile(schema as object);
    compiled.set(schema, fn);
  }
  return fn;
}

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

function article(type: string): string {
  return type === "integer" || type === "array" || type === "object" ? `an ${type}` : `a ${type}`;
}

/** Querystring and path values are strings: parse the ones whose schema wants a number or a boolean. */
function parseUrlValues(schema: JsonSchema, data: unknown): unknown {
  if (data === null || typeof data !== "object" || Array.isArray(data)) return data;
  const obj = data as Record<string, unknown>;
  let copy: Record<string, unknown> | null = null;
  for (const [key, raw] of Object.entries(obj)) {
    if (typeof raw !== "string") continue;
    const sub = schema.properties && Object.hasOwn(schema.properties, key) ? schema.properties[key] : undefined;
    const own = sub ?? (typeof schema.additionalProperties === "object" ? schema.additionalProperties : undefined);
    const types = own?.type === undefined ? [] : typeof own.type === "string" ? [own.type] : own.type;
    let parsed: unknown = raw;
    if (types.includes("integer") || types.includes("number")) {
      const n = raw.trim() === "" ? Number.NaN : Number(raw);
      if (Number.isFinite(n) && (types.includes("number") || Number.isInteger(n))) parsed = n;
    } else if (types.includes("boolean") && (raw === "true" || raw === "false")) {
      parsed = raw === "true";
    }
    if (parsed !== raw) {
      copy ??= { ...obj };
      copy[key] = parsed;
    }
  }
  return copy ?? data;
}

/** An issue, and whether it is about the value's shape (type, const, enum) rather than its content. */
interface Explained {
  issue: SchemaIssue;
  shape: boolean;
}

/** A short name for one `anyOf` alternative in a message. */
function summarize(schema: JsonSchema): string {
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  // An object told apart by a constant property (a tagged union): name the tag.
  const tag = Object.entries(schema.properties ?? {}).find(([, s]) => s.const !== undefined);
  if (tag) return `{ "${tag[0]}": ${JSON.stringify(tag[1].const)}, … }`;
  if (schema.type) return typeof schema.type === "string" ? schema.type : schema.type.join("|");
  if (schema.properties) return `{ ${Object.keys(schema.properties).join(", ")} }`;
  return "a value";
}

/** One Ajv error (not `anyOf`) in the words the API has always used. */
function explainOne(e: ErrorObject, part: RequestPart): Explained {
  const at = (pointer: string, detail: string, shape = false): Explained => ({ issue: { in: part, pointer, detail }, shape });
  const params = e.params as Record<string, unknown>;
  const parent = (e.parentSchema ?? {}) as JsonSchema;
  switch (e.keyword) {
    case "required":
      return at(`${e.instancePath}/${escapePointer(String(params.missingProperty))}`, "is required");
    case "additionalProperties": {
      const known = Object.keys(parent.properties ?? {});
      return at(
        `${e.instancePath}/${escapePointer(String(params.additionalProperty))}`,
        `is not a known property${known.length ? `; known: ${known.join(", ")}` : ""}`,
      );
    }
    case "type": {
      const types = typeof e.schema === "string" ? [e.schema] : (e.schema as string[]);
      return at(e.instancePath, `must be ${types.map(article).join(" or ")}; got ${describe(e.data)}`, true);
    }
    case "const":
      return at(e.instancePath, `must be ${JSON.stringify(params.allowedValue)}; got ${describe(e.data)}`, true);
    case "enum":
      return at(
        e.instancePath,
        `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}; got ${describe(e.data)}`,
        true,
      );
    case "minLength":
      return at(e.instancePath, `must have at least ${String(params.limit)} characters`);
    case "maxLength":
      return at(e.instancePath, `must have at most ${String(params.limit)} characters; got ${[...String(e.data)].length}`);
    case "pattern":
      return at(e.instancePath, `must match ${String(params.pattern)}; got ${describe(e.data)}`);
    case "format":
      if (params.format === "date-time") return at(e.instancePath, `must be an RFC 3339 date-time such as 2030-01-01T12:00:00Z; got ${describe(e.data)}`);
      if (params.format === "uri") return at(e.instancePath, `must be an absolute URL; got ${describe(e.data)}`);
      return at(e.instancePath, `must be a ${String(params.format)}; got ${describe(e.data)}`);
    case "minimum":
      return at(e.instancePath, `must be >= ${String(params.limit)}; got ${String(e.data)}`);
    case "maximum":
      return at(e.instancePath, `must be <= ${String(params.limit)}; got ${String(e.data)}`);
    case "minItems":
      return at(e.instancePath, `must have at least ${String(params.limit)} item(s)`);
    case "maxItems":
      return at(e.instancePath, `must have at most ${String(params.limit)} items; got ${(e.data as unknown[]).length}`);
    case "minProperties":
      return at(e.instancePath, `must have at least ${String(params.limit)} properties`);
    case "maxProperties":
      return at(e.instancePath, `must have at most ${String(params.limit)} properties`);
    default:
      return at(e.instancePath, e.message ?? `fails ${e.keyword}`);
  }
}

/**
 * Ajv's errors as issues. A failed `anyOf` reports every alternative's errors; like a reader
 * would, it is explained by the alternative whose shape fits (it failed on content, not on
 * type, const or enum), the one with the fewest issues, or else by naming the alternatives.
 */
function explain(errors: readonly ErrorObject[], part: RequestPart): Explained[] {
  const anyOfs = errors.filter((e) => e.keyword === "anyOf");
  const outer = anyOfs.filter((a) => !anyOfs.some((b) => b !== a && a.schemaPath.startsWith(`${b.schemaPath}/`)));
  const inside = new Set<ErrorObject>();
  for (const a of outer) for (const e of errors) if (e.schemaPath.startsWith(`${a.schemaPath}/`)) inside.add(e);
  const out: Explained[] = [];
  for (const e of errors) {
    if (inside.has(e)) continue;
    if (e.keyword !== "anyOf") {
      out.push(explainOne(e, part));
      continue;
    }
    const prefix = `${e.schemaPath}/`;
    const options = e.schema as JsonSchema[];
    let best: Explained[] | null = null;
    options.forEach((_option, index) => {
      const branch = errors.filter((x) => x.schemaPath.startsWith(`${prefix}${index}/`));
      const trial = explain(branch, part);
      if (trial.length > 0 && !trial.some((t) => t.shape) && (best === null || trial.length < best.length)) best = trial;
    });
    if (best) out.push(...(best as Explained[]));
    else {
      out.push({
        issue: { in: part, pointer: e.instancePath, detail: `must be one of: ${options.map(summarize).join(", ")}; got ${describe(e.data)}` },
        shape: true,
      });
    }
  }
  return out;
}

/**
 * Validates `value` against `schema` with Ajv; returns the issues (empty when valid), at most 20.
 * `parseUrl` parses string values for integer, number and boolean properties first (query and
 * path parameters); the returned `value` holds the parsed data.
 */
export function validate(schema: JsonSchema, value: unknown, part: RequestPart, parseUrl = false): { issues: SchemaIssue[]; value: unknown } {
  const data = parseUrl ? parseUrlValues(schema, value) : value;
  const check = compile(schema);
  if (check(data)) return { issues: [], value: data };
  const issues = explain(check.errors ?? [], part)
    .slice(0, MAX_ISSUES)
    .map((e) => e.issue);
  return { issues, value: data };
}

/**
 * Fastify validator compiler: installed in the plugin's own scope, so the user's other routes
 * keep whatever validation they had. Each route's schema is compiled once, when it registers.
 */
export function compileValidator({ schema, httpPart }: { schema: unknown; httpPart?: string }) {
  const part: RequestPart = httpPart === "querystring" || httpPart === "params" || httpPart === "headers" ? httpPart : "body";
  const parseUrl = part === "querystring" || part === "params";
  const s = schema as JsonSchema;
  compile(s);
  return (data: unknown): { value: unknown } | { error: RequestValidationError } => {
    const { issues, value } = validate(s, data, part, parseUrl);
    return issues.length > 0 ? { error: new RequestValidationError(issues) } : { value };
  };
}
