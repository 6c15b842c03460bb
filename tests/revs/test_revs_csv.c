/* The task-file parser of pipebench revs: RFC 4180 quoting, the three layouts, clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "revs/revs_internal.h"
#include "pipebench/revs.h"

#include "check.h"


static int parse(const char *text, pb_revs_task **t, size_t *n, struct pb_error *e) {
  memset(e, 0, sizeof *e);
  return pb_revs_tasks_parse(text, strlen(text), "t.csv", t, n, e);
}

/* A bad file fails with PB_EFORMAT and a message holding want. */
static void bad(const char *text, const char *want) {
  pb_revs_task *t = NULL;
  size_t n = 99;
  struct pb_error e;
  int rc = parse(text, &t, &n, &e);
  if (rc != PB_EFORMAT || strstr(e.message, want) == NULL || t != NULL || n != 0) {
    EXPECT_FAIL("bad input %.40s...: rc %d, message '%s', wanted '%s'", text, rc, e.message,
                want);
  }
}

int main(void) {
  pb_revs_task *t;
  size_t n;
  struct pb_error e;
  /* training layout, quoted overrides, CRLF, a BOM, blank lines */
  int rc = parse("\xEF\xBB\xBF" "branch,experiment,trainer,max_epochs,batch_size,overrides\r\n"
                 "main,base,cpu,3,32,\"lr=0.1; seed=4\"\r\n\r\n"
                 " feature/x , base ,gpu,1,8,\r\n",
                 &t, &n, &e);
  EXPECT(rc == PB_OK);
  EXPECT(n == 2);
  if (rc == PB_OK && n == 2) {
    EXPECT(t[0].kind == PB_REVS_TRAIN);
    EXPECT_STREQ(t[0].branch, "main");
    EXPECT_STREQ(t[0].overrides, "lr=0.1; seed=4");
    EXPECT(t[0].max_epochs == 3 && t[0].batch_size == 32);
    EXPECT(t[0].line == 2);
    EXPECT_STREQ(t[1].branch, "feature/x");
    EXPECT_STREQ(t[1].trainer, "gpu");
    EXPECT(t[1].line == 4);
    pb_revs_tasks_free(t, n);
  }
  /* command layout: a quoted comma, an escaped quote and a newline inside a field */
  rc = parse("branch,experiment,command,metrics\n"
             "v1,e,\"python train.py --tag \"\"a,b\"\"\nsecond\",m.json\n"
             "abc123,e,./run.sh,out/m.json",
             &t, &n, &e);
  EXPECT(rc == PB_OK);
  EXPECT(n == 2);
  if (rc == PB_OK && n == 2) {
    EXPECT(t[0].kind == PB_REVS_COMMAND);
    EXPECT_STREQ(t[0].command, "python train.py --tag \"a,b\"\nsecond");
    EXPECT_STREQ(t[1].metrics, "out/m.json");
    EXPECT(t[1].line == 4);
    EXPECT(t[1].trainer == NULL);
    pb_revs_tasks_free(t, n);
  }
  /* inference layout */
  rc = parse("branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides\n"
             "main,r50,ckpt/best.pt,data/x,cpu,16,model=resnet50\n", &t, &n, &e);
  EXPECT(rc == PB_OK && n == 1);
  if (rc == PB_OK) {
    EXPECT(t[0].kind == PB_REVS_INFER);
    EXPECT_STREQ(t[0].checkpoint_path, "ckpt/best.pt");
    EXPECT(t[0].batch_size == 16 && t[0].max_epochs == 0);
    pb_revs_tasks_free(t, n);
  }
  /* the guide's two layouts as written, trainer values not judged */
  rc = parse("branch,experiment,trainer,max_epochs,batch_size,overrides\n"
             "main,im2im/segmentation,gpu,5,8,\n"
             "phase-branch-name,im2im/segmentation,ddp,5,8,custom_override=value\n", &t, &n, &e);
  EXPECT(rc == PB_OK && n == 2);
  if (rc == PB_OK) {
    EXPECT_STREQ(t[0].experiment, "im2im/segmentation");
    EXPECT_STREQ(t[1].trainer, "ddp");
    EXPECT_STREQ(t[1].overrides, "custom_override=value");
    pb_revs_tasks_free(t, n);
  }
  rc = parse("branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides\n"
             "main,im2im/segmentation,path/to/checkpoint.ckpt,path/to/data,gpu,16,\n"
             "phase-branch-name,im2im/segmentation,path/to/checkpoint.ckpt,path/to/data,gpu,16,\n",
             &t, &n, &e);
  EXPECT(rc == PB_OK && n == 2);
  if (rc == PB_OK) {
    EXPECT_STREQ(t[1].data_path, "path/to/data");
    pb_revs_tasks_free(t, n);
  }
  /* overrides split on spaces and semicolons */
  char **items;
  size_t ni;
  EXPECT(pb__revs_split_overrides(" a=1;b=x ;; c.d-e=", &items, &ni, &e) == PB_OK);
  EXPECT(ni == 3);
  if (ni == 3) {
    EXPECT_STREQ(items[0], "a=1");
    EXPECT_STREQ(items[1], "b=x");
    EXPECT_STREQ(items[2], "c.d-e=");
  }
  pb__revs_free_strings(items, ni);
  EXPECT(pb__revs_split_overrides("a=1 y", &items, &ni, &e) == PB_EFORMAT);
  EXPECT(strstr(e.message, "'y'") != NULL);
  /* the guide's comma list; brackets and quotes keep their commas; Hydra's + and ~ keys */
  EXPECT(pb__revs_split_overrides("model.lr=0.1,data.sizes=[1,2], +x.y='a,b',~z", &items, &ni,
                                  &e) == PB_OK);
  EXPECT(ni == 4);
  if (ni == 4) {
    EXPECT_STREQ(items[0], "model.lr=0.1");
    EXPECT_STREQ(items[1], "data.sizes=[1,2]");
    EXPECT_STREQ(items[2], "+x.y='a,b'");
    EXPECT_STREQ(items[3], "~z");
  }
  pb__revs_free_strings(items, ni);
  EXPECT(pb__revs_split_overrides("a=[1,2", &items, &ni, &e) == PB_EFORMAT);

  bad("", "the file is empty");
  bad("\n\n", "the file is empty");
  bad("branch,experiment,command,metrics\n", "no task rows");
  bad("branch,experiment,colour\nmain,x,red\n", "unknown column 'colour'");
  bad("branch,branch,command,metrics\n", "appears twice");
  bad("branch,experiment,trainer,batch_size\nmain,x,cpu,2\n", "lacks column 'max_epochs'");
  bad("branch,experiment,command\nmain,x,y\n", "lacks column 'metrics'");
  bad("branch,experiment,command,metrics\nmain,x,y\n", "line 2: 3 fields, but the header has 4");
  bad("branch,experiment,command,metrics\nmain,x,a\"b,m\n", "line 2: a stray quote");
  bad("branch,experiment,command,metrics\nmain,x,\"ab\"c,m\n", "line 2: text after a closing quote");
  bad("branch,experiment,command,metrics\nmain,x,\"ab,m\n", "line 2: a quoted field is never closed");
  bad("branch,experiment,command,metrics\n,x,y,m\n", "line 2: the branch is empty");
  bad("branch,experiment,command,metrics\nmain,x,,m\n", "the command is empty");
  bad("branch,experiment,command,metrics\nmain,x,y,\n", "the metrics file is empty");
  bad("branch,experiment,trainer,max_epochs,batch_size\nmain,x, ,1,2\n", "the trainer is empty");
  /* an unquoted comma-separated overrides list splits the row: the message says to quote it */
  bad("branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,x,cpu,1,2,a=1,b=2\n",
      "line 2: 7 fields, but the header has 6: a comma-separated overrides list must be quoted");
  bad("branch,experiment,trainer,max_epochs,batch_size\nmain,x,cpu,0,2\n", "max_epochs must be");
  bad("branch,experiment,trainer,max_epochs,batch_size\nmain,x,cpu,2,many\n", "batch_size must be");
  bad("branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,x,cpu,2,4,oops\n",
      "line 2: override 'oops'");
  bad("branch,experiment,command,metrics,checkpoint_path\nmain,x,y,m,c\n", "not both");

  EXPECT(pb_revs_tasks_read("/nonexistent/tasks.csv", &t, &n, &e) == PB_ENOTFOUND);
  if (check_failures() == 0) printf("test_revs_csv: all checks passed\n");
  return check_failures() == 0 ? 0 : 1;
}
