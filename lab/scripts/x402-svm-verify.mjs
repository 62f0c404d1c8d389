// The official x402 SVM facilitator (`@x402/svm`, from npm) verifying a payment we built: the
// reference implementation's reading of the exact SVM scheme, checked against the lab's SVM
// JSON-RPC (its simulation). Reads one JSON object on stdin:
//   {"rpcUrl": ..., "feePayerKeypair": [64 numbers], "paymentPayload": {...},
//    "paymentRequirements": {...}}
// and prints the facilitator's VerifyResponse as one JSON line.
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { ExactSvmScheme } from "@x402/svm/exact/facilitator";
import { toFacilitatorSvmSigner } from "@x402/svm";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const keypair = await createKeyPairSignerFromBytes(new Uint8Array(input.feePayerKeypair));
const signer = toFacilitatorSvmSigner(keypair, { defaultRpcUrl: input.rpcUrl });
const facilitator = new ExactSvmScheme(signer);
const answer = await facilitator.verify(input.paymentPayload, input.paymentRequirements);
process.stdout.write(JSON.stringify(answer) + "\n");
