// Validates Prometheus Operator objects (monitoring.coreos.com/v1 PodMonitor, ServiceMonitor)
// against the schemas generated from the Prometheus Operator CRDs
// (@kubernetes-models/prometheus-operator, installed by hack/install-tools.sh into
// .tools/npm). kubernetes-validate has no schema for these kinds: it only warns and passes them.
// These schemas check types, enums, patterns and required fields; they do not refuse unknown
// fields (the CRDs do not either: the API server prunes them).
//
//   python -c '...yaml to a JSON array...' | node hack/validate-monitoring.mjs
//
// Reads a JSON array of objects on stdin; every object must be a kind it knows. Prints one line
// per object; exit status 1 if any is invalid or unknown, or none was given.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const models = path.join(root, ".tools/npm/node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js");
const v1 = await import(pathToFileURL(models).href);
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = objects.length === 0;
if (failed) console.log("no monitoring.coreos.com objects to validate");
for (const o of objects) {
  const name = `${o.kind} ${o.metadata?.name}`;
  const Kind = o.apiVersion === "monitoring.coreos.com/v1" ? v1[o.kind] : undefined;
  if (!Kind) {
    console.log(`FAIL ${name}: no schema for ${o.apiVersion} ${o.kind}`);
    failed = true;
    continue;
  }
  try {
    new Kind(o).validate();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
