/* cli_pull: `dspark pull` and the --pull option of run, chat and serve. */
#include <stdio.h>
#include <string.h>

#include "base/hub.h"
#include "cli/cli.h"
#include "spec/modelref.h"
#include "spec/pull.h"

const char PULL_HELP[] =
    "usage: dspark pull ORG/NAME[@REVISION] [--revision R] [--include GLOB]... [--no-drafters]\n"
    "Downloads a model from the Hugging Face hub into the hub cache ($HF_HUB_CACHE, else\n"
    "$HF_HOME/hub, else ~/.cache/huggingface/hub), where huggingface_hub and transformers\n"
    "find it too, then the DSpark / DFlash drafters registered for it. Prints the snapshot\n"
    "folder, which --model takes (as does --model ORG/NAME with --pull).\n"
    "      --revision R      branch, tag or commit (default main)\n"
    "      --include GLOB    only the files whose repo path matches (fnmatch; repeatable);\n"
    "                        default: config, generation config, tokenizer and template\n"
    "                        files, *.safetensors and their index; *.gguf only in a repo\n"
    "                        without safetensors (one file, else choose with --include)\n"
    "      --no-drafters     the model only\n"
    "Files already in the cache are not fetched again; an interrupted pull resumes where it\n"
    "stopped. Every file is checked against the hub's SHA-256 (LFS) or git blob id.\n"
    "Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (gated or private\n"
    "models; else the token `hf auth login` saved).\n";

static void fill(pull_opts *po, const opts *o) {
    memset(po, 0, sizeof *po);
    po->hub.revision = o->revision;
    po->hub.include = o->include;
    po->hub.n_include = o->n_include;
    po->hub.log = stderr;
    po->hub.tty = -1;
    po->no_drafters = o->no_drafters;
}

int cmd_pull(const opts *o) {
    if (!o->text) cli_die("pull: which model? (dspark pull ORG/NAME, see dspark pull --help)");
    if (o->n_rest) cli_die("pull: unexpected argument \"%s\"", o->rest[0]);
    if (o->revision && strchr(o->text, '@')) cli_die("pull: give the revision once: in the id or with --revision");
    pull_opts po;
    fill(&po, o);
    char snap[4096], err[4096];
    int failed = 0;
    if (pull_model(o->text, &po, snap, sizeof snap, &failed, err, sizeof err) != 0) cli_die("%s", err);
    printf("%s\n", snap);
    if (failed) {
        fprintf(stderr, "dspark: %d drafter%s not pulled (see above); the model itself is complete\n", failed,
                failed > 1 ? "s were" : " was");
        return 1;
    }
    return 0;
}

void cli_pull_args(opts *o) {
    static char model_path[4096], drafter_path[4096];
    pull_opts po;
    fill(&po, o);
    char err[4096];
    char found[4096], miss[8192];
    /* an id found on this machine (modelref's places) is not pulled again */
    if (o->model && modelref_resolve(o->model, MODELREF_TARGET, NULL, found, sizeof found, miss, sizeof miss) != 0) {
        if (pull_resolve(o->model, !o->drafter, &po, model_path, sizeof model_path, err, sizeof err) != 0) cli_die("%s", err);
        o->model = model_path;
    }
    if (o->drafter && modelref_resolve(o->drafter, MODELREF_DRAFTER, o->model, found, sizeof found, miss, sizeof miss) != 0) {
        /* a drafter's own files: the model's --revision and --include are not its */
        po.hub.revision = NULL;
        po.hub.include = NULL;
        po.hub.n_include = 0;
        if (pull_resolve(o->drafter, 0, &po, drafter_path, sizeof drafter_path, err, sizeof err) != 0) cli_die("%s", err);
        o->drafter = drafter_path;
    }
}
