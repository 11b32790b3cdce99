// Validates rendered Kubernetes manifests offline against the Kubernetes OpenAPI schemas that the npm package
// kubernetes-models ships (field types, required fields, enums, formats; not unknown fields, which the schemas
// allow). Each object's model class is chosen by its apiVersion and kind; an apiVersion or kind that
// kubernetes-models does not know fails, as does a document that is not a mapping, a duplicate key or a YAML
// error. Used by deploy/validate.sh.
//
//   node validate.mjs FILE... ("-" reads standard input)
//
// Prints one line per object (ok / FAIL with each schema error) and exits 0 when every object validated, 1 when
// any did not, 2 on usage errors or unreadable files.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node validate.mjs FILE... (- for standard input)");
  process.exit(2);
}

// apiVersion -> the kubernetes-models module holding its kinds ("v1" is the core group).
async function modelModule(apiVersion) {
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) return null;
  try {
    return await import(`kubernetes-models/${apiVersion}`);
  } catch (err) {
    if (err.code === "ERR_PACKAGE_PATH_NOT_EXPORTED" || err.code === "ERR_MODULE_NOT_FOUND") return null;
    throw err;
  }
}

function describe(obj) {
  const md = obj && typeof obj.metadata === "object" && obj.metadata ? obj.metadata : {};
  const ns = md.namespace ? `${md.namespace}/` : "";
  return `${obj?.kind ?? "?"} ${ns}${md.name ?? "?"}`;
}

let objects = 0;
let failures = 0;
const objectsToCheck = [];
function fail(where, what, details = []) {
  failures++;
  console.log(`FAIL ${where}: ${what}`);
  for (const d of details) console.log(`     ${d}`);
}

for (const file of files) {
  let text;
  try {
    text = readFileSync(file === "-" ? 0 : file, "utf8");
  } catch (err) {
    console.error(`validate.mjs: cannot read ${file}: ${err.message}`);
    process.exit(2);
  }
  const docs = parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true });
  if (!Array.isArray(docs)) {
    fail(file, "not a YAML stream");
    continue;
  }
  docs.forEach((doc, index) => {
    const where = `${file}#${index + 1}`;
    if (doc.errors.length > 0) {
      fail(where, "YAML error", doc.errors.map((e) => e.message));
      return;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) return; // an empty document ("---" at the end)
    objects++;
    if (typeof obj !== "object" || Array.isArray(obj)) {
      fail(where, "not a mapping");
      return;
    }
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
      fail(where, "no apiVersion or kind");
      return;
    }
    objectsToCheck.push({ where, obj });
  });
}

// Checked after parsing, one at a time: module imports are asynchronous.
async function checkAll() {
  for (const { where, obj } of objectsToCheck) {
    const name = `${where} ${obj.apiVersion} ${describe(obj)}`;
    const mod = await modelModule(obj.apiVersion);
    if (mod === null) {
      fail(name, `unknown apiVersion ${obj.apiVersion}: kubernetes-models has no schema for it`);
      continue;
    }
    const Model = Object.prototype.hasOwnProperty.call(mod, obj.kind) ? mod[obj.kind] : undefined;
    if (typeof Model !== "function" || Model.kind !== obj.kind || Model.apiVersion !== obj.apiVersion) {
      fail(name, `unknown kind ${obj.kind} in ${obj.apiVersion}: kubernetes-models has no schema for it`);
      continue;
    }
    try {
      new Model(obj).validate();
      console.log(`ok   ${name}`);
    } catch (err) {
      const details = Array.isArray(err.errors)
        ? err.errors.map((e) => `${e.instancePath || "/"}: ${e.message}` +
            (e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(", ")})` : ""))
        : [String(err.message ?? err)];
      fail(name, "does not match the Kubernetes schema", details);
    }
  }
}

await checkAll();
if (objects === 0) fail(files.join(" "), "no Kubernetes objects");
console.log(`${objects} objects, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
