// A real OpenID provider for gpudash's sign-in tests: node's oidc-provider (OpenID certified), with its
// development sign-in pages (any password), three users and one client for gpudash.
//
//   node provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URL POST_LOGOUT_URL
//
// Users: ana in gpu-admins, bo in gpu-users, cy in students (cy's e-mail address unverified). Groups come in the `groups` claim (scope
// `groups`), names in `preferred_username` (scope `profile`); both are in UserInfo, and in the ID token too
// when gpudash asks for no access token claims (oidc-provider's conformIdTokenClaims puts them in UserInfo).
//
// For the refusal tests, `POST /_test/next-id-token?mode=M` makes the next token answer carry a bad ID
// token: `tampered` (a claim changed after signing), `expired`, `wrong-issuer`, `wrong-audience` (each
// signed with the provider's own key, so only that one check can refuse it). Prints "ready" when serving.

import { generateKeyPair, exportJWK, importJWK, SignJWT, decodeJwt, decodeProtectedHeader } from 'jose';
import { Provider } from 'oidc-provider';

const [port, clientId, clientSecret, redirect, postLogout] = process.argv.slice(2);
if (!postLogout) {
  console.error('usage: node provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URL POST_LOGOUT_URL');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const users = {
  ana: { groups: ['staff', 'gpu-admins'], email: 'ana@lab.example.org' },
  bo: { groups: ['gpu-users'], email: 'bo@lab.example.org' },
  // cy's address is not verified: a dashboard that names people by e-mail must not take it.
  cy: { groups: ['students'], email: 'cy@lab.example.org', unverified: true },
};

const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };
const signingKey = await importJWK(jwk, 'RS256');

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirect],
    post_logout_redirect_uris: [postLogout],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  cookies: { keys: ['gpudash-test-cookie-key'] },
  async findAccount(ctx, id) {
    const user = users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id, preferred_username: id, name: id, email: user.email, email_verified: !user.unverified, groups: user.groups,
        };
      },
    };
  },
});

let mode = 'ok';
const now = () => Math.floor(Date.now() / 1000);

async function spoil(idToken, how) {
  const claims = decodeJwt(idToken);
  const header = decodeProtectedHeader(idToken);
  const resign = (changed) => new SignJWT({ ...claims, ...changed }).setProtectedHeader(header).sign(signingKey);
  switch (how) {
    case 'tampered': {
      const [h, , s] = idToken.split('.');
      const body = Buffer.from(JSON.stringify({ ...claims, sub: 'root' })).toString('base64url');
      return `${h}.${body}.${s}`;
    }
    case 'expired': return resign({ iat: now() - 7200, exp: now() - 3600 });
    case 'wrong-issuer': return resign({ iss: 'http://127.0.0.1:1/another-issuer' });
    case 'wrong-audience': return resign({ aud: 'another-client' });
    default: throw new Error(`unknown mode ${how}`);
  }
}

provider.use(async (ctx, next) => {
  if (ctx.path === '/_test/next-id-token') {
    mode = String(ctx.query.mode || 'ok');
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.path === '/token' && mode !== 'ok' && ctx.body && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: await spoil(ctx.body.id_token, mode) };
    mode = 'ok';
  }
});

provider.listen(Number(port), '127.0.0.1', () => console.log('ready'));
