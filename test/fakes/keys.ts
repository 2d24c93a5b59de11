// A service-account key pair made for the test run: the connector signs with the private key, the
// fake token endpoint verifies with the public one.
import { generateKeyPairSync, type KeyObject } from 'node:crypto';

export interface TestServiceAccount {
  credentials: { type: 'service_account'; client_email: string; private_key: string; private_key_id: string };
  publicKey: KeyObject;
}

export function makeServiceAccount(
  clientEmail = 'inlet-sync@test-project.iam.gserviceaccount.com',
): TestServiceAccount {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    credentials: {
      type: 'service_account',
      client_email: clientEmail,
      private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      private_key_id: 'test-key-1',
    },
    publicKey,
  };
}
