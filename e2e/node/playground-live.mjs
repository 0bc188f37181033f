// playground-live.mjs drives the playground's live audit tab in Debian's
// Chromium with playwright-core, as an admin watching an incident does: open
// the page, open the LiveAudit tab, paste a token and the workspace id, start
// it, then make a change in another window (a second page of the same
// browser runs createTask through the API) and read the event as it arrives
// in the result pane. It prints one JSON object on stdout; the assertions are
// made by the Go test (e2e/live_test.go).
//
// usage: node playground-live.mjs <base url> <token> <workspace id> <project id> <screenshot.png>
// env: CHROMIUM (default /usr/bin/chromium)
import { openPlayground, openTab, runInBrowser, signIn } from './browser.mjs';

const [baseURL, token, workspaceId, projectId, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node playground-live.mjs <base url> <token> <workspace id> <project id> <screenshot.png>');
  process.exit(2);
}

await runInBrowser(baseURL, screenshot, async (b) => {
  const { context, page, out, step } = b;
  await openPlayground(b, baseURL);
  await openTab(b, 'LiveAudit');
  await signIn(b, token, { workspaceId });
  await page.locator('.graphiql-execute-button').click();
  step('subscription started');
  const result = page.locator('.result-window');

  // Another window makes changes until one shows up (the first may commit
  // before the subscription is open on the server).
  const other = await context.newPage();
  await other.goto(baseURL + '/', { waitUntil: 'load' });
  out.createdTaskIds = [];
  let seen = false;
  for (let i = 0; i < 40 && !seen; i++) {
    const id = await other.evaluate(async ([t, p, title]) => {
      const r = await fetch('/query', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${t}` },
        body: JSON.stringify({
          query: 'mutation($p: ID!, $t: String!) { createTask(input: {projectId: $p, title: $t}) { id } }',
          variables: { p, t: title },
        }),
      });
      return (await r.json()).data.createTask.id;
    }, [token, projectId, `incident ${i}`]);
    out.createdTaskIds.push(id);
    try {
      await result.filter({ hasText: id }).waitFor({ timeout: 1500 });
      seen = true;
    } catch {}
  }
  step(seen ? 'event arrived' : 'no event arrived');
  out.resultText = await result.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  out.visibleResultText = await result.innerText();
});
