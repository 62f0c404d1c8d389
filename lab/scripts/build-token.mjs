// Compiles a lab contract with the npm `solc` (solcjs, pinned in the root package.json) and writes the
// fixture the Rust lab deploys: lab/fixtures/NAME.json (ABI, bytecode, compiler version and the
// sha256 of the source it was built from, so a test can tell when the fixture is stale). NAME is the
// token, LabUSDC, unless `--contract NAME` names another (LabAgentRegistry, the ERC-8004 registry).
//
// Usage, from anywhere in the repository after `npm ci` at its root:
//   node lab/scripts/build-token.mjs [--contract NAME]          # rebuild the fixture
//   node lab/scripts/build-token.mjs [--contract NAME] --check  # exit 1 if the committed fixture is not what we build

import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const named = process.argv.indexOf("--contract");
const CONTRACT = named >= 0 ? process.argv[named + 1] : "LabUSDC";
const labDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const sourcePath = join(labDir, "contracts", `${CONTRACT}.sol`);
const fixturePath = join(labDir, "fixtures", `${CONTRACT}.json`);
const sourceName = `${CONTRACT}.sol`;

// Pinned so the bytecode does not change when solc's defaults do. cancun is old enough for any chain
// the lab might run on and new enough for everything the token uses.
const settings = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  outputSelection: {
    [sourceName]: { [CONTRACT]: ["abi", "evm.bytecode.object", "evm.deployedBytecode.object", "evm.methodIdentifiers"] },
  },
};

const source = readFileSync(sourcePath);
const sourceSha256 = createHash("sha256").update(source).digest("hex");

const input = { language: "Solidity", sources: { [sourceName]: { content: source.toString("utf8") } }, settings };
const output = JSON.parse(solc.compile(JSON.stringify(input)));

let failed = false;
for (const diagnostic of output.errors ?? []) {
  console.error(diagnostic.formattedMessage ?? diagnostic.message);
  if (diagnostic.severity === "error") failed = true;
}
if (failed) {
  console.error(`${sourceName}: compilation failed`);
  process.exit(1);
}

const compiled = output.contracts?.[sourceName]?.[CONTRACT];
if (!compiled || !compiled.evm?.bytecode?.object) {
  console.error(`${sourceName}: the compiler returned no bytecode for ${CONTRACT}`);
  process.exit(1);
}

const fixture = {
  contract: CONTRACT,
  source: `contracts/${sourceName}`,
  sourceSha256,
  solcVersion: solc.version(),
  settings: { optimizer: settings.optimizer, evmVersion: settings.evmVersion },
  abi: compiled.abi,
  methodIdentifiers: compiled.evm.methodIdentifiers,
  bytecode: `0x${compiled.evm.bytecode.object}`,
  deployedBytecode: `0x${compiled.evm.deployedBytecode.object}`,
};
const text = `${JSON.stringify(fixture, null, 2)}\n`;

if (process.argv.includes("--check")) {
  let committed = "";
  try {
    committed = readFileSync(fixturePath, "utf8");
  } catch {
    // A missing fixture is simply stale.
  }
  if (committed !== text) {
    console.error(`fixtures/${CONTRACT}.json is stale: run node lab/scripts/build-token.mjs`);
    process.exit(1);
  }
  console.log(`fixtures/${CONTRACT}.json is up to date (source sha256 ${sourceSha256})`);
} else {
  writeFileSync(fixturePath, text);
  console.log(`wrote fixtures/${CONTRACT}.json (solc ${solc.version()}, source sha256 ${sourceSha256})`);
}
