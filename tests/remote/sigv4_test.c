/* SHA-256, HMAC-SHA-256 and SigV4 against published answers:
 *   SHA-256: FIPS 180-2 appendix B ("abc", the 448-bit message, a million 'a').
 *   HMAC-SHA-256: RFC 4231 test cases 1 and 2.
 *   SigV4: AWS's Signature Version 4 test suite (docs.aws.amazon.com/general/latest/gr/
 *     signature-v4-test-suite.html: get-vanilla, get-vanilla-query-order-key-case; key
 *     AKIDEXAMPLE, 20150830T123600Z, us-east-1, service "service"), and the S3 GetObject example
 *     of AWS's S3 API reference ("Signature Calculations for the Authorization Header:
 *     Transferring Payload in a Single Chunk", examplebucket/test.txt with Range bytes=0-9). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/s3_sigv4.h"

static void sha_hex(const void *p, size_t n, char out[65]) {
  uint8_t d[32];
  pb__sha256(p, n, d);
  pb__hex(d, 32, out);
}

int main(void) {
  char h[65];
  sha_hex("", 0, h);
  EXPECT_STREQ(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha_hex("abc", 3, h);
  EXPECT_STREQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha_hex(m2, strlen(m2), h);
  EXPECT_STREQ(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  char *mil = malloc(1000000);
  CHECK(mil != NULL);
  memset(mil, 'a', 1000000);
  sha_hex(mil, 1000000, h);
  EXPECT_STREQ(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(mil);

  uint8_t key1[20], mac[32];
  memset(key1, 0x0b, sizeof key1);
  pb__hmac_sha256(key1, 20, "Hi There", 8, mac);
  pb__hex(mac, 32, h);
  EXPECT_STREQ(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const char *msg2 = "what do ya want for nothing?";
  pb__hmac_sha256("Jefe", 4, msg2, strlen(msg2), mac);
  pb__hex(mac, 32, h);
  EXPECT_STREQ(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

  char auth[1024], creq[2048];
  pb__sigv4_header vanilla[] = {{"x-amz-date", "20150830T123600Z"}, {"host", "example.amazonaws.com"}};
  pb__sigv4_request rq = {.method = "GET", .path = "/", .query = "", .headers = vanilla,
                          .nheaders = 2,
                          .payload_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                          .amz_date = "20150830T123600Z", .region = "us-east-1",
                          .service = "service", .key_id = "AKIDEXAMPLE",
                          .secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
  CHECK_OK(pb__sigv4_authorization(&rq, auth, sizeof auth, creq, sizeof creq), NULL);
  EXPECT_STREQ(creq, "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                     "host;x-amz-date\n"
                     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_STREQ(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                     "aws4_request, SignedHeaders=host;x-amz-date, "
                     "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  rq.query = "Param2=value2&Param1=value1";
  CHECK_OK(pb__sigv4_authorization(&rq, auth, sizeof auth, NULL, 0), NULL);
  EXPECT_CONTAINS(auth, "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");

  pb__sigv4_header s3h[] = {{"host", "examplebucket.s3.amazonaws.com"},
                            {"range", "bytes=0-9"},
                            {"x-amz-content-sha256",
                             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
                            {"x-amz-date", "20130524T000000Z"}};
  pb__sigv4_request s3 = {.method = "GET", .path = "/test.txt", .query = "", .headers = s3h,
                          .nheaders = 4,
                          .payload_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                          .amz_date = "20130524T000000Z", .region = "us-east-1", .service = "s3",
                          .key_id = "AKIAIOSFODNN7EXAMPLE",
                          .secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
  CHECK_OK(pb__sigv4_authorization(&s3, auth, sizeof auth, NULL, 0), NULL);
  EXPECT_STREQ(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                     "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                     "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");

  char *enc = pb__sigv4_encode("a b/c~d+é", 1);
  CHECK(enc != NULL);
  EXPECT_STREQ(enc, "a%20b/c~d%2B%C3%A9");
  free(enc);
  enc = pb__sigv4_encode("a/b", 0);
  EXPECT_STREQ(enc, "a%2Fb");
  free(enc);
  return check_failures() != 0;
}
